package memory

import (
	"errors"
	"fmt"
	"maps"
	"slices"
)

// ErrChanged is wrapped by the error of a write that expected a memory at a version
// (Expect) the memory is no longer at: another writer changed it since the caller
// read it (this process or another node on the namespace's stream). Nothing was
// written. The caller reads the memory again and decides anew; the same write
// repeated as it is fails again.
var ErrChanged = errors.New("memory: the memory changed since it was read")

// WriteOption is an option of a write that changes memories (Forget, Merge,
// Promote, Distill, Invalidate).
type WriteOption func(*WriteOptions)

// WriteOptions are a write's options, as its options set them (WriteOptionsOf).
type WriteOptions struct {
	// Expect holds, by memory ID, the version (Memory.Version) each memory must
	// still be at for the write to be made; a version 0 is not checked.
	Expect map[string]uint64
}

// Expect makes a write a compare-and-set: it is refused with an error wrapping
// ErrChanged unless each memory named is still at its version (Memory.Version, as
// the caller read it), and with ErrNotFound if one is no longer live. The namespace
// checks it against its stream as stored, in the write's own append: a change
// another writer appended first, even from another process, is seen. Expect given
// more than once adds to the versions.
func Expect(versions map[string]uint64) WriteOption {
	return func(o *WriteOptions) {
		if o.Expect == nil {
			o.Expect = make(map[string]uint64, len(versions))
		}
		maps.Copy(o.Expect, versions)
	}
}

// WriteOptionsOf returns the options opts set.
func WriteOptionsOf(opts ...WriteOption) WriteOptions {
	var o WriteOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// Check returns an error wrapping ErrNotFound for a memory Expect names that
// version says is not live, one wrapping ErrChanged for one at another version than
// expected, and nil when each is as expected, in the order of their IDs. version
// returns a live memory's version.
func (o WriteOptions) Check(namespace string, version func(id string) (uint64, bool)) error {
	for _, id := range slices.Sorted(maps.Keys(o.Expect)) {
		want := o.Expect[id]
		if want == 0 {
			continue
		}
		got, ok := version(id)
		switch {
		case !ok:
			return fmt.Errorf("%w: %q in namespace %s", ErrNotFound, id, namespace)
		case got != want:
			return fmt.Errorf("%w: %q in namespace %s is at version %d, not %d as expected", ErrChanged, id, namespace, got, want)
		}
	}
	return nil
}

// expected checks o against the folded state. The caller holds mu.
func (ns *Namespace) expected(o WriteOptions) error {
	return o.Check(ns.name, func(id string) (uint64, bool) {
		m := ns.st.mems[id]
		if m == nil {
			return 0, false
		}
		return m.Version, true
	})
}
