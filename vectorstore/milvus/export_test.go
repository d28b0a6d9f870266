package milvus

// ProbeIdle is how long a connection must be idle before a request checks it.
const ProbeIdle = probeIdle
