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

// UniqueIDs is the optional capability of an IDs that never makes the same ID
// twice, in this process or any other (random UUIDs): an ID it made is in no log
// yet. Find it with a type assertion; SubmitTask.New relies on it.
type UniqueIDs interface {
	IDs
	// Unique reports whether every ID is new in that sense.
	Unique() bool
}

// Unique implements UniqueIDs: a UUIDv7 has 74 random bits besides its time.
func (UUIDv7) Unique() bool { return true }

// NewID implements IDs.
func (UUIDv7) NewID() string {
	id, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only if the system's random source does.
		return uuid.NewString()
	}
	return id.String()
}
