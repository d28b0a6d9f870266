// Package actors holds Troupe's actors (protoactor-go): the SessionHost that spawns and
// passivates one SessionActor per session, the SessionActor that runs an agent as a
// state machine folded from its events, the ModelActor every model call goes through,
// and one ToolActor per tool.
//
// Messages enter as a TaskSubmitted envelope forwarded to the SessionHost (by the node's
// bus router) and as results from model and tool actors; they leave as sequenced events
// appended to the event log and published on the bus topic messages.TopicEvents.
//
// The agent's decisions (SessionState.Apply and SessionState.Decide) are pure: no clock,
// no randomness, no map-order dependence. Recovery after a panic or a killed process is
// "read the events, fold them, re-issue only effects that were requested and never
// answered, with the same idempotency key".
//
// Supervision policies, stated per actor: session actors are restarted by the
// SessionHost (OneForOne, up to 5 restarts in 10 s, then stopped and left resumable in
// the log); the SessionHost itself is resumed after a failure, never restarted, as a
// restart would stop every session it hosts; the model and tool actors are restarted
// on failure (OneForOne, 10 in 10 s),
// and they run user code in recovered goroutines so that a panicking tool or model
// becomes an error result, never a crashed session.
//
// In a cluster, the SessionHost runs only the sessions its node owns (SetOwnership),
// hands them over when their partitions move (ReleaseSessions, then Drain on each:
// no new effects, calls in flight answered and recorded), and RemoteEffects stands in
// for the model or tool actors on a node without that role: it publishes each call as
// a messages.EffectRequest and turns the reply into the result the session waits for;
// PerformEffect is the serving side.
package actors
