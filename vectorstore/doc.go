// Package vectorstore defines the vector store seam used by memory and RAG: upsert
// vectors with metadata, search by cosine similarity with a metadata filter, delete.
// The embedded implementation in this package searches exactly and persists to a file;
// Milvus is the distributed one. Both run the suite in vectorstore/vectorstoretest.
package vectorstore
