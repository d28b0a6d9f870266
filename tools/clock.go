package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-run/troupe/messages"
)

// TimeSource tells the time. The clock tool reads time only through it, so tests and
// replays can inject a fixed or recorded time (actors.Clock satisfies it).
type TimeSource interface {
	Now() time.Time
}

// Clock is the tool that tells a model the current date and time, optionally in a
// time zone. It is safe for concurrent use; the zero value uses the system clock.
type Clock struct {
	src TimeSource
}

var _ Tool = (*Clock)(nil)

// NewClock returns a clock tool that reads the time from src; nil means the system
// clock.
func NewClock(src TimeSource) *Clock {
	return &Clock{src: src}
}

const clockParameters = `{"type":"object","properties":{"timezone":{"type":"string",` +
	`"description":"IANA time zone name such as \"Europe/Paris\" or \"America/New_York\"; default UTC"}},` +
	`"additionalProperties":false}`

// clockArguments reads the clock's arguments as every tool's are read
// (ArgumentParser): JSON or key=value pairs, coerced and checked against its schema.
var clockArguments = mustArgumentParser("clock", clockParameters)

// Spec implements Tool.
func (*Clock) Spec() messages.ToolSpec {
	return messages.ToolSpec{
		Name: "clock",
		Description: "Returns the current date and time as RFC 3339 with the day of the week, " +
			"e.g. \"2026-11-29T23:10:00Z (Sunday)\", in UTC or in the given IANA time zone.",
		Parameters: json.RawMessage(clockParameters),
	}
}

// Call implements Tool. Arguments are {"timezone": "Europe/Paris"}, {} or empty (UTC).
// The result is the time to the second in RFC 3339 and its weekday in that zone:
// "2026-11-30T00:10:00+01:00 (Monday)". An unknown zone wraps ErrInvalidArguments.
//
// Zone names resolve through the system's time zone database, or through the copy
// embedded in a binary that imports time/tzdata (needed where the system has none,
// as in a scratch container).
func (c *Clock) Call(ctx context.Context, call Call) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	args, err := clockArguments.Parse(call.Arguments)
	if err != nil {
		return "", err
	}
	zone, _ := args["timezone"].(string)
	loc, err := location(strings.TrimSpace(zone))
	if err != nil {
		return "", err
	}
	var now time.Time
	if c == nil || c.src == nil {
		now = time.Now()
	} else {
		now = c.src.Now()
	}
	t := now.In(loc)
	return fmt.Sprintf("%s (%s)", t.Format(time.RFC3339), t.Weekday()), nil
}

// location resolves an IANA zone name. "Local" is refused: it would leak the host's
// zone and make results depend on where a node runs.
func location(name string) (*time.Location, error) {
	switch {
	case name == "" || strings.EqualFold(name, "UTC") || strings.EqualFold(name, "Z"):
		return time.UTC, nil
	case len(name) > 64:
		return nil, &ArgumentError{Tool: "clock", Reason: "timezone is too long for an IANA time zone name"}
	case strings.EqualFold(name, "local"):
		return nil, &ArgumentError{Tool: "clock", Reason: `"Local" is not allowed: name an IANA time zone such as "Europe/Paris", or omit timezone for UTC`}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, &ArgumentError{Tool: "clock", Reason: fmt.Sprintf(
			"unknown time zone %q: use an IANA name such as \"Europe/Paris\", \"America/New_York\" or \"UTC\"", name)}
	}
	return loc, nil
}

// SideEffects implements Effectful: telling the time changes nothing.
func (*Clock) SideEffects() bool { return false }
