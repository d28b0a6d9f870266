// Package eventlogtest is the conformance suite of the event log seam. Every
// eventlog.Log implementation runs it from its own tests, so that the embedded and
// the distributed logs cannot drift apart:
//
//	func TestConformance(t *testing.T) {
//		eventlogtest.Run(t, eventlogtest.Features{}, func(t *testing.T) eventlog.Log {
//			return openEmptyLog(t) // a new, empty log; registers its own Close
//		})
//	}
//
// Data enters the implementation under test through Append, as envelopes of real
// payload types built with messages.NewEnvelope, and leaves through Read and Sessions,
// where the suite compares it exactly (reflect.DeepEqual, payload bytes included).
// Features relaxes what an implementation cannot promise, such as read-your-writes
// visibility; its zero value is the strictest.
//
// It also holds logs that fail on purpose (PanicsOnToolResult), for the tests of
// what writes to a log.
package eventlogtest
