package memory

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/troupe-run/troupe/eventlog"
	"github.com/troupe-run/troupe/messages"
)

// StreamPrefix starts the ID of every memory namespace's stream in the event log.
const StreamPrefix = eventlog.MemoryStreamPrefix

// Status is what session listings show as the status of a memory stream, which is
// not a session and has none.
const Status = "memory"

// Stream returns the ID of the stream that holds namespace's events.
func Stream(namespace string) string { return StreamPrefix + namespace }

// IsStream reports whether a stream ID of the event log is a memory namespace.
func IsStream(id string) bool { return strings.HasPrefix(id, StreamPrefix) }

// Tier is one of the four memory tiers.
type Tier string

// The tiers.
const (
	// Working memory holds the current context: bounded (capacity) and short-lived (TTL).
	Working Tier = "working"
	// Episodic memory holds events: what happened, when, who took part, how it ended.
	Episodic Tier = "episodic"
	// Semantic memory holds facts, concepts and rules, with the entities and
	// relations extracted from them.
	Semantic Tier = "semantic"
	// Perceptual memory holds descriptions of text, images and audio, one collection
	// per modality.
	Perceptual Tier = "perceptual"
)

// Tiers lists the tiers in their order of precedence.
var Tiers = []Tier{Working, Episodic, Semantic, Perceptual}

// ParseTier reads a tier name.
func ParseTier(s string) (Tier, error) {
	switch t := Tier(s); t {
	case Working, Episodic, Semantic, Perceptual:
		return t, nil
	}
	return "", fmt.Errorf("%w: unknown tier %q: want working, episodic, semantic or perceptual", ErrInvalid, s)
}

// Modality is the kind of content a perceptual memory holds.
type Modality string

// The modalities.
const (
	Text  Modality = "text"
	Image Modality = "image"
	Audio Modality = "audio"
)

// ParseModality reads a modality name; empty is Text.
func ParseModality(s string) (Modality, error) {
	switch m := Modality(s); m {
	case "":
		return Text, nil
	case Text, Image, Audio:
		return m, nil
	}
	return "", fmt.Errorf("%w: unknown modality %q: want text, image or audio", ErrInvalid, s)
}

// Memory is one memory as its namespace's fold holds it.
type Memory struct {
	ID        string   `json:"id"`
	Namespace string   `json:"namespace"`
	Tier      Tier     `json:"tier"`
	Modality  Modality `json:"modality"`
	Content   string   `json:"content"`
	URI       string   `json:"uri,omitempty"`
	// Importance is in [0, 1].
	Importance float64 `json:"importance"`
	// Timestamp is when the remembered thing happened: recency and decay age from it.
	Timestamp time.Time `json:"timestamp"`
	// Created and Updated are the times of the events that added and last changed it.
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Hash identifies the normalised content: exact duplicates share it.
	Hash     string          `json:"hash"`
	Vector   []float32       `json:"-"`
	Embedder string          `json:"-"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	// Participants and Outcome describe an episode.
	Participants []string `json:"participants,omitempty"`
	Outcome      string   `json:"outcome,omitempty"`
	// Entities and Relations were extracted on write (semantic tier).
	Entities  []string                  `json:"entities,omitempty"`
	Relations []messages.MemoryRelation `json:"relations,omitempty"`
	// Sources is the memory's provenance.
	Sources []messages.MemorySource `json:"sources,omitempty"`
	// InvalidAt is set when a newer memory (InvalidBy) contradicted this one: it is
	// kept, with its history, but no longer true.
	InvalidAt *time.Time `json:"invalid_at,omitempty"`
	InvalidBy string     `json:"invalid_by,omitempty"`
	// Version is the seq of the namespace's event that last changed the memory
	// (added, updated, merged into, promoted, invalidated it): folded from the
	// stream, it is the same on every node and after a replay, and a write can
	// expect it (Expect) to be refused if another writer changed the memory since.
	Version uint64 `json:"version,omitempty"`
}

// Limits of a namespace name.
const MaxNamespaceLen = 128

// CheckNamespace accepts namespace names like "user:alice" or "agent:planner":
// 1 to 128 bytes of letters, digits and . _ - : @.
func CheckNamespace(ns string) error {
	if ns == "" {
		return fmt.Errorf("%w: empty namespace", ErrInvalid)
	}
	if len(ns) > MaxNamespaceLen {
		return fmt.Errorf("%w: namespace longer than %d bytes", ErrInvalid, MaxNamespaceLen)
	}
	for _, c := range ns {
		ok := c == '.' || c == '_' || c == '-' || c == ':' || c == '@' ||
			('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9')
		if !ok {
			return fmt.Errorf("%w: namespace %q: use 1 to %d ASCII letters, digits and . _ - : @ (like user:alice)", ErrInvalid, ns, MaxNamespaceLen)
		}
	}
	return nil
}

// CheckImportance accepts an importance in [0, 1].
func CheckImportance(v float64) error {
	if !(v >= 0 && v <= 1) { // NaN fails too
		return fmt.Errorf("%w: importance %v outside [0, 1]", ErrInvalid, v)
	}
	return nil
}

// Errors of memory operations.
var (
	// ErrInvalid means a malformed request (empty content, importance outside [0,1],
	// unknown tier, action or modality, a bad namespace): nothing was changed.
	ErrInvalid = errors.New("memory: invalid request")
	// ErrNotFound means no live memory has the ID.
	ErrNotFound = errors.New("memory: no such memory")
	// ErrKeyReused: an Add came under an idempotency key that was applied to an
	// Add of other memories. It wraps ErrInvalid; nothing is written.
	ErrKeyReused = fmt.Errorf("%w: the idempotency key was used for other memories", ErrInvalid)
)
