// Package messages is Troupe's wire contract: the envelope every bus message and
// every logged event travels in, and the concrete payload types carried inside it.
//
// Data enters as Go values (TaskSubmitted, ModelResponded, …) wrapped by NewEnvelope,
// and leaves as bytes from Marshal; bytes come back through Unmarshal and Envelope.Decode.
// The encoding is JSON with a per-type schema version. JSON was chosen over protobuf
// because the same bytes are stored in the event log and queried there: ClickHouse's
// visitParamExtract* functions read JSON payloads directly, so analytics need no decoder.
// Golden files in testdata/ pin the encoding: an old session must decode forever.
//
// commands.go holds the internal commands nodes of a cluster exchange — EffectRequest,
// EffectReply, EffectCancel, CancelRequest — versioned by CommandVersion and pinned by
// golden files too; they are never stored as events. An effect's idempotency key is
// one type, EffectKey, with its text form and parser beside it.
//
// The package holds types and their encoding only, no behaviour.
package messages
