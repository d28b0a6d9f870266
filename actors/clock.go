package actors

import (
	"time"

	"github.com/google/uuid"
)

// Clock tells the time. The replay path gets a fixed one.
type Clock interface {
	Now() time.Time
}

// IDs makes unique identifiers for sessions and ingress messages.
type IDs interface {
	NewID() string
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now implements Clock.
func (SystemClock) Now() time.Time { return time.Now() }

// UUIDv7 makes time-ordered UUIDs (RFC 9562), so IDs sort by creation time.
type UUIDv7 struct{}

// NewID implements IDs.
func (UUIDv7) NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only if the system's random source does.
		return uuid.NewString()
	}
	return id.String()
}
