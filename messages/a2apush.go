package messages

// The events of an A2A task's push-notification configs (package a2a). They are
// appended to a stream of their own, "a2a/push/<taskID>" (eventlog.A2APushStreamPrefix:
// not a session, no task runs there), and the task's configs are the fold of that
// stream, so that they outlive the node that was given them. A config's secrets (its
// token, its authentication credentials) are never in them in plain text: HadToken
// and HadCredentials say that the config had them, and Sealed holds them encrypted
// with a key that is not in the log.

// A2APushSet records a push-notification config set for a task (a config with the
// same ID replaces it).
type A2APushSet struct {
	ConfigID string `json:"config_id"`
	URL      string `json:"url"`
	// Schemes are the config's authentication schemes ("Bearer", …), without the
	// credentials.
	Schemes []string `json:"schemes,omitempty"`
	// HadToken and HadCredentials say that the config had a token or credentials,
	// which are never recorded in plain text.
	HadToken       bool `json:"had_token,omitempty"`
	HadCredentials bool `json:"had_credentials,omitempty"`
	// HadURLCredentials says that the config's URL had credentials (a password, a
	// ?token=...: redact.URL), which URL holds as "[REDACTED]" and Sealed whole.
	HadURLCredentials bool `json:"had_url_credentials,omitempty"`
	// Sealed holds the token and credentials (and the URL that had credentials)
	// encrypted with the node's secret key
	// (a2a.PushSealer), which is not in the log; empty when the config had neither,
	// or was set by a node that kept them in memory only.
	Sealed string `json:"sealed,omitempty"`
	// Version is the A2A version of the request that set the config, which its
	// notifications speak: "1.0" (a 1.0 StreamResponse) or empty (0.3, the task
	// as 0.3 has it).
	Version string `json:"version,omitempty"`
}

// A2APushDeleted records that a task's push-notification config was deleted
// (ConfigID empty: all of them).
type A2APushDeleted struct {
	ConfigID string `json:"config_id,omitempty"`
}

// A2APushFinal records that a task's last notification, of the state it ended in,
// was posted to a config: the webhook took it (Status 2xx) or refused it for good
// (a 4xx other than 429). A node that starts posts the end of each ended task to
// those of its configs without one (a2a.Server.ResumePushes): the node that was
// to post it may have stopped first.
//
// With ConfigID empty and Holder set, it is instead a lease of the task's
// notifications: until UntilUS (Unix microseconds, the holder's clock), only the
// node Holder posts them (a2a.PushStore), so that no node posts a stale update
// of the running task after another posted its end. A build that knows no
// leases reads it as an end posted to no config: nothing.
type A2APushFinal struct {
	ConfigID string `json:"config_id"`
	State    string `json:"state"`
	Status   int    `json:"status,omitempty"`
	Holder   string `json:"holder,omitempty"`
	UntilUS  int64  `json:"until_us,omitempty"`
}

// MessageType implements Payload.
func (*A2APushSet) MessageType() Type { return TypeA2APushSet }

// MessageType implements Payload.
func (*A2APushDeleted) MessageType() Type { return TypeA2APushDeleted }

// MessageType implements Payload.
func (*A2APushFinal) MessageType() Type { return TypeA2APushFinal }
