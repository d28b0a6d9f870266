// Package react gives tools to models that cannot call them natively, through the
// ReAct text protocol: the tools are described in the system prompt, the model answers
// in text ("Thought: …" then "Action: tool[input]" or "Finish[answer]"), and the
// answer is parsed back into a structured tool call or a final answer.
//
// Parsing is tolerant (extra whitespace, code fences, "Action Input:" lines, JSON or
// key=value inputs); a reply that still cannot be parsed goes back to the model as a
// readable error, a bounded number of times, before the call fails: only the latest
// reply, clipped to its head and tail, so that a retry is about as long as the
// request. Wrap a model with it when llm.CapabilitiesOf(model).NativeTools is false;
// the node does so itself.
package react
