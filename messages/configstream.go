package messages

import "fmt"

// The configurations of agents that tasks ran under (decision rules 7:
// TaskSubmitted.ConfigDigest) are stored once per log, each in a stream of its own,
// "config/<digest>" (ConfigStreamPrefix; eventlog.NonSessionPrefixes: not a session,
// no task runs there), whose one event, ConfigRecorded at seq 1, holds it. Its ID is
// derived from its position ("config/<digest>/1"), and its content is a function of
// the digest: two nodes storing the same configuration at once write the same event
// at the same position, which the log keeps once. A task names its configuration by
// digest; a session that folds it reads the stream.

// ConfigStreamPrefix starts the ID of every stream of the log that holds an agent's
// configuration: config/<digest>.
const ConfigStreamPrefix = "config/"

// TypeConfigRecorded is the event of a stream that holds an agent's configuration.
const TypeConfigRecorded Type = "config.recorded"

// ConfigRecorded is the one event of a configuration's stream: the configuration
// whose digest is Digest (TaskSubmitted.ConfigDigest), its secrets redacted.
type ConfigRecorded struct {
	Digest string      `json:"digest"`
	Config AgentConfig `json:"config"`
}

// MessageType implements Payload.
func (*ConfigRecorded) MessageType() Type { return TypeConfigRecorded }

// ConfigStream is the stream that holds the configuration of digest.
func ConfigStream(digest string) string { return ConfigStreamPrefix + digest }

// ConfigRecordedEvent is the event that stores c, the configuration of digest, in its
// stream: seq 1, its ID derived from its position, stamped at ts (Unix
// microseconds).
func ConfigRecordedEvent(digest string, c AgentConfig, ts int64) (Envelope, error) {
	e, err := NewEnvelope(&ConfigRecorded{Digest: digest, Config: c})
	if err != nil {
		return e, err
	}
	stream := ConfigStream(digest)
	e.ID, e.SessionID, e.Seq, e.TS, e.Actor = stream+"/1", stream, 1, ts, "session"
	return e, nil
}

// RecordedConfig returns the configuration a configuration's stream holds (its
// events, as read from the log): that of its first event, which must be a
// ConfigRecorded of the stream's digest. ok is false for a stream with no events.
func RecordedConfig(digest string, events []Envelope) (c *AgentConfig, ok bool, err error) {
	if len(events) == 0 {
		return nil, false, nil
	}
	p, err := events[0].Decode()
	if err != nil {
		return nil, false, err
	}
	r, isConfig := p.(*ConfigRecorded)
	if !isConfig || r.Digest != digest {
		return nil, false, fmt.Errorf("%w: stream %s holds %s, not the configuration of %s", ErrCorrupt, events[0].SessionID, events[0].Type, digest)
	}
	return &r.Config, true, nil
}
