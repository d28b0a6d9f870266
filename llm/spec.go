package llm

import (
	"fmt"
	"strings"
)

// FromSpec returns the model a command-line spec names: "offline" (or empty) for the
// offline planner, "scripted:FILE" for a script file.
func FromSpec(spec string) (Model, error) {
	switch {
	case spec == "" || spec == OfflineName:
		return NewOffline(), nil
	case strings.HasPrefix(spec, "scripted:"):
		return LoadScript(strings.TrimPrefix(spec, "scripted:"))
	}
	return nil, fmt.Errorf("unknown model %q: use offline or scripted:FILE", spec)
}
