// Package bpe counts the tokens of a text in OpenAI's tiktoken encodings
// (cl100k_base, o200k_base, p50k_base, p50k_edit, r50k_base), as tiktoken counts
// them, in time that grows as n log n with the length of the text, whatever the
// text holds.
//
// A text enters as a string and leaves as a count. A Counter splits it into the
// encoding's pieces with a scanner written for the encoding's pattern (no
// backtracking regular expression), and merges each piece's byte pairs by rank:
// by a scan for a short piece, with a heap for a long one. tiktoken-go scans for
// every merge, so one long unbroken piece costs it time that grows with the
// square of its length: 64 KB of "a" takes seconds, a megabyte half an hour.
// A Counter counts the megabyte in well under a second: it merges a long piece
// in chunks of a few kilobytes joined where their tokens meet, and keeps the
// merges of the last few long pieces it counted, so that a prefix or a suffix of
// one (each try of a search for where to cut a text to fit a window) is counted
// from them with a few hundred bytes merged anew. Both give the counts of merging
// each piece whole; memo.go says why.
//
// The ranks are compiled into the binary (tiktoken-go-loader), so counting needs
// no network. Tests hold every encoding to tiktoken-go's counts (bpetest).
package bpe
