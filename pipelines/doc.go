// Package pipelines holds pure, side-effect-free logic that actors call: context
// engineering, RAG, memory scoring and compression. Functions take values and return
// values; nothing here does I/O, reads the clock or draws random numbers, so the replay
// path can call it and get the same answer every time.
package pipelines
