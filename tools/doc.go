// Package tools defines the Tool interface agents call and the built-in tools: a
// calculator (a safe arithmetic evaluator: it parses, it never evaluates code) and a
// clock. Tool actors in package actors run tools with timeouts and panic recovery; this
// package holds only the tools themselves.
package tools
