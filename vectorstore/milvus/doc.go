// Package milvus is the distributed vector store: a vectorstore.Store on a Milvus
// server, through milvus-sdk-go/v2 over gRPC. Nodes of a cluster share its
// collections; the embedded default is vectorstore.Embedded, and both pass the
// conformance suite in vectorstore/vectorstoretest (here against Milvus 2.3.5
// standalone, which deploy/milvus.sh runs without Docker).
//
// Data enters through Upsert and Delete and leaves through Search, as the Store
// contract describes. New connects; Close is idempotent and leaves the data on the
// server, so a new Store with the same Config sees it all again.
//
// # Collections
//
// A collection called name is the Milvus collection Config.Prefix+name, created on
// its first Upsert with the dimension of that batch, which its schema then keeps
// even when every item is deleted. Its description holds name: a name too long for
// Milvus (255 bytes) once prefixed is cut and followed by a hash of the whole name,
// and a Store refuses a collection whose description is not the name it asked for.
// A Store remembers the collections it has seen (their dimension, that they are
// loaded), and asks the server again when a request finds a collection gone, or
// of a dimension other than the one it remembers, or refused by the server: a
// collection dropped and made again with another dimension by another client (a
// move to another embedding model) is then taken as it is now
// (TestCollectionMadeAgainWithAnotherDimension). The schema:
//
//	id        VarChar(65535), primary key (the Item's ID)
//	vector    FloatVector(dim), the vector as upserted (not normalized)
//	text      VarChar(65535)
//	metadata  JSON: an object with the metadata's values under hex-encoded keys
//
// Metadata keys are stored hex-encoded ("k" followed by the hex of the key's bytes)
// because Milvus 2.3 reads the key of a JSON path (metadata["…"]) literally and
// splits paths at "][": a key with a quote, a backslash or a bracket could not be
// filtered on. Values stay as they are; in a filter they are written as Go-quoted
// string literals, which the server reads back with strconv.Unquote. So any key
// and value, quotes, backslashes, line breaks, NUL and any Unicode included, is
// stored, returned and matched exactly (TestHostileMetadata).
//
// # Index and exactness
//
// The vector field has a FLAT index with the COSINE metric: Milvus compares the
// query with every item that passes the filter, exactly as the embedded store does,
// so results never depend on index parameters, and "filter before ranking" holds by
// construction (an approximate index under a selective filter can return fewer
// than K hits). Items written since the last flush live in growing segments,
// which Milvus 2.3 also searches exactly under a FLAT index: the test
// TestExactSearchLargerCollection compares 3,000 items, many times the server's
// 128-row chunks, with brute force, with and without a filter. A search costs time
// linear in the collection, spread over the query nodes; for collections of
// millions of vectors an HNSW index would be the next step, with the suite's exact
// checks relaxed to recall, and is not offered yet.
//
// Milvus returns scores computed in float32 and, at the K-th place, cuts ties
// arbitrarily. The Store therefore asks for more than K hits (2K, at least K+16),
// fetching four times as many again while the last hit returned still ties with
// the K-th (within 1e-4), recomputes each hit's cosine in float64 from its stored
// vector, orders by score, then ID, and keeps K. A search returns at most 16,384
// hits (Milvus's top-K limit); a larger K fails with ErrInvalid.
//
// # Consistency
//
// Config.Consistency sets the level of every search. The default is Strong: a
// search sees every write acknowledged before it started, by any node, which is
// what the Store contract promises. Its price on Milvus 2.3 is latency: a Strong
// search waits for the server's next time tick (proxy.timeTickInterval, 200 ms),
// about 400 ms per search on the CI machine (BenchmarkSearch), whatever the
// collection's size.
//
// Session is about 30 times faster (some 14 ms) and passes the suite too: a search
// waits only for this Store's own writes to its collection (the SDK keeps their
// timestamps; Milvus 2.3 gives deletes none, so a Delete ends with one Strong query
// that makes it visible). A search in a collection this Store has not yet written
// is Strong. Writes of other nodes appear within a time tick or two. Choose
// Session where one node owns a collection's writes at a time, as the owner of a
// memory namespace does. Bounded and Eventually are faster still and may miss the
// Store's own writes of the last seconds: they break the contract and are offered
// for read-mostly collections.
//
// # Atomicity and limits
//
// Upsert validates the whole batch first (the contract's rules, then Milvus's
// limits below) and sends nothing unless all of it passes; a batch that names an
// ID twice keeps the later item. The batch then goes to Milvus as one upsert
// request to the collection's one shard (the Store creates collections with one).
// Milvus has no transactions: its proxy turns an upsert into a delete and an insert
// of the batch's rows. A request the server refuses changes nothing; a server that
// crashes in the middle of one could leave part of it applied.
// Retrying an Upsert or Delete is always safe. A collection created by an Upsert
// whose write then fails stays, with that batch's dimension.
//
// What Milvus cannot store fails with vectorstore.ErrInvalid before anything is
// written: IDs, texts, metadata keys and values that are not valid UTF-8 (gRPC
// carries them as protobuf strings), an ID or text over 65,535 bytes, metadata over
// 64 KiB of JSON, and a dimension over 32,768. A filter with a key or value that
// is not valid UTF-8 matches nothing.
//
// Errors of the server or the connection are returned wrapped, and wrap
// vectorstore.ErrClosed once the Store is closed; they are not vectorstore's
// permanent errors, and a retry may succeed — except an Upsert the server answered
// with a refusal of what was sent (not a gRPC failure, a timeout, nor a passing
// state of the server such as a rate or memory limit or a collection not loaded),
// which wraps vectorstore.ErrRefused: vectorstore.UpsertIsolating then finds the
// items it refuses and writes the others. A request that finds no connection
// to the server is tried four times, and fails within about 2.5 s when the server
// is down (the SDK's own policy took 22 s); the Store reconnects by itself when
// the server is back. A connection that dies without a word (a NAT or proxy that
// forgets it and sends no reset) is checked by a request that finds the server
// silent for a second, and by one that waits two seconds for its answer: the Store
// asks the server for its version, and when no answer comes within 1.5 s closes the
// connection's sockets, so that gRPC connects anew and the request is retried on the
// new connection (TestSilentlyDroppedConnectionIsReplaced: 1.5 s when idle, 3.7 s
// when busy, where keepalive alone took 19 s). A collection dropped under the
// Store (or lost with the server's data) is forgotten by the request that finds it
// gone, which then tries once more: an Upsert creates it again
// (TestCollectionDroppedUnderTheStore). One the server no longer holds loaded
// (released by an operator, or by a Milvus killed and started again) is loaded
// again by the search, or the Session delete, that finds it "not loaded"
// (TestCollectionReleasedUnderTheStoreIsLoadedAgain). A load is asked for and not
// waited for by writes, which Milvus takes while it loads: a search waits for it,
// for a collection the Store created up to Config.RequestTimeout, for one it found
// not loaded (which may load for minutes) up to 10 s in all from when it found it
// so; after that a search fails at once saying the collection is loading, until it
// is loaded (TestACollectionStillLoadingTakesWritesAndFailsSearchesAtOnce).
package milvus
