package actors

import (
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// roundTrip returns s encoded and decoded (a fold snapshot's state).
func roundTrip(t *testing.T, s *SessionState) *SessionState {
	t.Helper()
	b, err := encodeState(s)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeState(b, s.SessionID, s.agents)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// sameFold returns where two states differ ("" where they are deeply equal), the
// request-building cache (which a snapshot does not hold) aside.
func sameFold(a, b *SessionState) string {
	ca, cb, ka, kb := a.ctx, b.ctx, a.key, b.key
	a.ctx, b.ctx = contextCache{}, contextCache{}
	a.key, b.key = ka, ka // keyAt's memo
	defer func() { a.ctx, b.ctx, a.key, b.key = ca, cb, ka, kb }()
	if reflect.DeepEqual(a, b) {
		return ""
	}
	if d := foldDiff(reflect.ValueOf(a), reflect.ValueOf(b), "s"); d != "" {
		return d
	}
	return "(somewhere)"
}

// A fold snapshot taken after any event, with the events after it folded on
// top, is the state the whole history folds to: after every event of sessions
// of many shapes (tools, every compression strategy, reflection, queued tasks, a
// long session), the state restored from a snapshot taken at the previous event
// and folded on equals the full fold, and so do its next decision and request;
// and states restored at a few seqs and folded through the whole rest equal the
// last full fold.
func TestSnapshotThenTailFoldsTheSameState(t *testing.T) {
	shapes := refoldShapes(t)
	as := Agents{Default: benchStepAgent()}
	_, events := runLongSession(t, as, "long", longShape{tasks: 30, resultBytes: 300, steps: 2, calls: 2})
	shapes["long"] = struct {
		as     Agents
		events []messages.Envelope
	}{as, events}
	for name, sh := range shapes {
		t.Run(name, func(t *testing.T) {
			// step folds e into s and decides as a session actor does, which fills
			// the memos the decisions keep in the state.
			step := func(s *SessionState, e messages.Envelope) (*Decision, []byte) {
				if err := s.Apply(e); err != nil {
					t.Fatalf("event %d (%s): %v", e.Seq, e.Type, err)
				}
				d := s.DecideAmong(sh.as, s.LastSeq+1, e.TS+1)
				if _, _, ok := s.PendingModel(); ok {
					b, err := json.Marshal(s.Request(sh.as.Default))
					if err != nil {
						t.Fatal(err)
					}
					return d, b
				}
				return d, nil
			}
			whole := NewSessionState(sh.events[0].SessionID).WithAgents(sh.as)
			restored := roundTrip(t, whole)
			var cuts []*SessionState
			for i, e := range sh.events {
				dw, bw := step(whole, e)
				dr, br := step(restored, e)
				if diff := sameFold(whole, restored); diff != "" {
					t.Fatalf("after event %d (%s) the state restored at the previous event differs from the full fold at %s", e.Seq, e.Type, diff)
				}
				if !reflect.DeepEqual(dw, dr) || string(bw) != string(br) {
					t.Fatalf("after event %d (%s) the decisions or requests differ:\n%+v %s\n%+v %s", e.Seq, e.Type, dw, bw, dr, br)
				}
				for _, c := range cuts {
					step(c, e)
				}
				restored = roundTrip(t, whole)
				if i%(len(sh.events)/7+1) == 0 {
					cuts = append(cuts, roundTrip(t, whole))
				}
			}
			if len(cuts) < 3 {
				t.Fatalf("%d cuts", len(cuts))
			}
			for _, c := range cuts[:len(cuts)-1] {
				if diff := sameFold(whole, c); diff != "" {
					t.Fatalf("a state restored from a snapshot, folded to the end, differs from the full fold at %s", diff)
				}
			}
		})
	}
}

// foldDiff names the first place where a and b differ ("" if none).
func foldDiff(a, b reflect.Value, path string) string {
	if a.Kind() != b.Kind() {
		return path
	}
	switch a.Kind() {
	case reflect.Pointer, reflect.Interface:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return path + " (nil)"
			}
			return ""
		}
		if a.Kind() == reflect.Interface && a.Elem().Type() != b.Elem().Type() {
			return path + " (type)"
		}
		return foldDiff(a.Elem(), b.Elem(), path)
	case reflect.Struct:
		for i := range a.NumField() {
			if d := foldDiff(a.Field(i), b.Field(i), path+"."+a.Type().Field(i).Name); d != "" {
				return d
			}
		}
		return ""
	case reflect.Slice, reflect.Array:
		if a.Kind() == reflect.Slice && a.IsNil() != b.IsNil() {
			return path + " (nil slice)"
		}
		if a.Len() != b.Len() {
			return path + " (len)"
		}
		for i := range a.Len() {
			if d := foldDiff(a.Index(i), b.Index(i), path+"["+strconv.Itoa(i)+"]"); d != "" {
				return d
			}
		}
		return ""
	case reflect.Map:
		if a.IsNil() != b.IsNil() {
			return path + " (nil map)"
		}
		if a.Len() != b.Len() {
			return path + " (map len)"
		}
		it := a.MapRange()
		for it.Next() {
			y := b.MapIndex(it.Key())
			if !y.IsValid() {
				return path + " (key)"
			}
			if d := foldDiff(it.Value(), y, path+"{}"); d != "" {
				return d
			}
		}
		return ""
	case reflect.Func:
		if a.IsNil() != b.IsNil() {
			return path
		}
		return ""
	case reflect.Float32, reflect.Float64:
		if a.Float() != b.Float() {
			return path
		}
		return ""
	case reflect.String:
		if a.String() != b.String() {
			return path
		}
		return ""
	case reflect.Bool:
		if a.Bool() != b.Bool() {
			return path
		}
		return ""
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if a.Int() != b.Int() {
			return path
		}
		return ""
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if a.Uint() != b.Uint() {
			return path
		}
		return ""
	}
	return ""
}
