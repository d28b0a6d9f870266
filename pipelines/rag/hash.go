package rag

import (
	"crypto/sha256"
	"encoding/hex"
)

// DocumentHash returns the hex SHA-256 of a document's bytes: the key an ingestion
// run compares with the stored one to skip a document that has not changed.
func DocumentHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// textHash returns the hex SHA-256 of a text.
func textHash(text string) string {
	sum := sha256.Sum256([]byte(text))
	return hex.EncodeToString(sum[:])
}
