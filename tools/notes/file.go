package notes

// File is the "notes" section of the "tools" of a node's configuration file, as
// cmd/node reads it to run the agent and cmd/replay reads it again to rebuild that
// agent (verify, fork):
//
//	"tools": {"notes": {"max_body_bytes": 8192, "max_tags": 16, "max_notes": 1000, "expand": false}}
//
// The section present enables the notes unless enabled is false; a zero limit is its
// default. Whoever reads the file checks the limits' ranges.
type File struct {
	Enabled      *bool `json:"enabled"`
	MaxBodyBytes int   `json:"max_body_bytes"`
	MaxTags      int   `json:"max_tags"`
	MaxNotes     int   `json:"max_notes"`
	// Expand offers notes_add, notes_list, … instead of one notes tool.
	Expand bool `json:"expand"`
}

// Config returns the configuration f asks for, without its Log, or nil when f is
// nil or disabled.
func (f *File) Config() *Config {
	if f == nil || (f.Enabled != nil && !*f.Enabled) {
		return nil
	}
	return &Config{MaxBodyBytes: f.MaxBodyBytes, MaxTags: f.MaxTags, MaxNotes: f.MaxNotes, Expand: f.Expand}
}
