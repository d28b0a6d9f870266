package memory

import (
	"fmt"

	"github.com/troupe-run/troupe/messages"
)

// RestoreConflict says why the memory changes of another log (changes: events
// of the namespace's stream that one session made there, in seq order) cannot be
// appended after the events held by the namespace's stream in this one (held,
// from seq 1), or returns "": appended, a change is folded after everything
// held, so one that puts back a memory this log removed since (forgot, merged,
// cleared) would bring it back, and one that changes a memory or a core block
// this log changed after the change's time would undo that later change. A
// change held already (by its ID) is not looked at. It fails when held does not
// fold.
func RestoreConflict(namespace string, held, changes []messages.Envelope) (string, error) {
	s := newState(namespace)
	last := map[string]int64{}   // the time of the last event naming a memory
	blocks := map[string]int64{} // the time of the last change to a block
	var blocksCleared int64      // the time of the last clear_all
	ids := make(map[string]bool, len(held))
	note := func(e messages.Envelope, p messages.Payload, eff effect) {
		puts, removes, label := named(p)
		for _, id := range append(puts, removes...) {
			last[id] = e.TS
		}
		for _, m := range eff.removed {
			last[m.ID] = e.TS
		}
		if label != "" {
			blocks[label] = e.TS
		}
		if c, ok := p.(*messages.MemoryCleared); ok && c.Tier == "" {
			blocksCleared = e.TS
		}
	}
	for _, e := range held {
		ids[e.ID] = true
		eff, err := s.apply(e)
		if err != nil {
			return "", err
		}
		if p, err := e.Decode(); err == nil {
			note(e, p, eff)
		}
	}
	for _, e := range changes {
		if ids[e.ID] {
			continue
		}
		p, err := e.Decode()
		if err != nil {
			return "", fmt.Errorf("memory: %w", err)
		}
		puts, removes, label := named(p)
		for _, id := range puts {
			if _, ok := s.seen[id]; ok && s.mems[id] == nil {
				return fmt.Sprintf("its %s of memory %s would bring back a memory this log removed since", e.Type, id), nil
			}
		}
		for _, id := range append(puts, removes...) {
			if s.mems[id] != nil && last[id] > e.TS {
				return fmt.Sprintf("its %s of memory %s would undo a later change this log made to it", e.Type, id), nil
			}
		}
		if label != "" && max(blocks[label], blocksCleared) > e.TS {
			return fmt.Sprintf("its %s of core block %q would undo a later change this log made to it", e.Type, label), nil
		}
		e.Seq = s.seq + 1
		eff, err := s.apply(e)
		if err != nil {
			return "", err
		}
		note(e, p, eff)
	}
	return "", nil
}

// named returns the memories a memory change puts (added or changed, live after
// it) and those it removes or marks, by the IDs its payload names, and the core
// block it sets or deletes.
func named(p messages.Payload) (puts, removes []string, block string) {
	switch p := p.(type) {
	case *messages.MemoryAdded:
		puts = []string{p.Memory.MemoryID}
	case *messages.MemoryUpdated:
		puts = []string{p.Memory.MemoryID}
	case *messages.MemoryPromoted:
		puts = []string{p.Memory.MemoryID}
	case *messages.MemoryDistilled:
		puts = []string{p.Memory.MemoryID}
	case *messages.MemoryMerged:
		puts = []string{p.Memory.MemoryID}
		for _, id := range p.Merged {
			if id != p.Memory.MemoryID {
				removes = append(removes, id)
			}
		}
	case *messages.MemoryInvalidated:
		removes = []string{p.MemoryID}
	case *messages.MemoryForgotten:
		removes = p.MemoryIDs
	case *messages.MemoryBlockSet:
		block = p.Label
	case *messages.MemoryBlockDeleted:
		block = p.Label
	}
	return puts, removes, block
}
