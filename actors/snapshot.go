package actors

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"unsafe"

	"github.com/troupe-run/troupe/messages"
)

// A fold snapshot is a derived cache of a session's folded state at some seq
// (eventlog.FoldSnapshot), never a source of truth: a session actor that finds
// one whose key (foldKey) is its own, whose checksum holds, and whose event at
// that seq is still the log's (the same ID and the same content: eventSum) folds
// the events after it onto the decoded state; otherwise, or on any error, it
// folds the whole history as without it. Replay, verify and fork never use one.
//
// The codec walks SessionState by reflection, field by field, as the fold left
// it: pointers shared within the state stay shared (a task is both in tasks and
// active), a paradigm's run state is one of snapshotRuns, and the caches that
// hold buffers shared with other sessions (contextCache) are not encoded, nor the
// agents (the session's deps give them). A state holding anything else it
// cannot encode (a function, a channel, a run of another type: a team's, which
// holds its compiled paradigm) has no snapshot: its session folds from the start.

// snapshotCodec is the version of the encoding below; snapshotLayout adds the
// shape of the types it walks, so that a build whose state has other fields
// ignores the snapshots of another.
const snapshotCodec = 1

// snapshotRuns are the paradigms' run states a snapshot holds, by their index.
var snapshotRuns = []reflect.Type{
	reflect.TypeFor[*reflectionRun](),
	reflect.TypeFor[*reflexionRun](),
	reflect.TypeFor[*planRun](),
}

var (
	typeAgentsPtr    = reflect.TypeFor[*Agents]()
	typeContextCache = reflect.TypeFor[contextCache]()
	typeParadigm     = reflect.TypeFor[Paradigm]()
)

// snapshotSkips reports whether the codec leaves a field of type t as its zero
// value: the agents (given on load) and the request-building cache.
func snapshotSkips(t reflect.Type) bool { return t == typeAgentsPtr || t == typeContextCache }

// snapshotLayout is snapshotCodec and a digest of the layout of the types the
// codec walks (names, kinds, fields), computed once.
var snapshotLayout = func() string {
	h := sha256.New()
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		fmt.Fprintf(h, "%s/%s/%d;", t.String(), t.Kind(), t.Size())
		if seen[t] {
			return
		}
		seen[t] = true
		switch t.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array:
			if t.Kind() == reflect.Array {
				fmt.Fprintf(h, "[%d]", t.Len())
			}
			walk(t.Elem())
		case reflect.Map:
			walk(t.Key())
			walk(t.Elem())
		case reflect.Struct:
			for i := range t.NumField() {
				f := t.Field(i)
				fmt.Fprintf(h, "{%s}", f.Name)
				if !snapshotSkips(f.Type) {
					walk(f.Type)
				}
			}
		}
	}
	walk(reflect.TypeFor[SessionState]())
	for _, t := range snapshotRuns {
		walk(t)
	}
	return strconv.Itoa(snapshotCodec) + "/" + hex.EncodeToString(h.Sum(nil)[:12])
}()

// errNoSnapshot says that a state cannot be encoded; errBadSnapshot that an
// encoding cannot be decoded.
var (
	errNoSnapshot  = errors.New("actors: the state has no snapshot encoding")
	errBadSnapshot = errors.New("actors: corrupt fold snapshot")
)

// encodeState encodes s's folded state (decodeState reads it back).
func encodeState(s *SessionState) (out []byte, err error) {
	e := &stateEncoder{ptrs: map[ptrKey]uint64{}, plans: plans{}}
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("%w: %v", errNoSnapshot, r)
		}
	}()
	e.value(reflect.ValueOf(s).Elem())
	if e.err != nil {
		return nil, e.err
	}
	return e.buf, nil
}

// decodeState decodes an encodeState encoding into a state of session id with
// agents as.
func decodeState(b []byte, id string, as *Agents) (s *SessionState, err error) {
	d := &stateDecoder{buf: b, plans: plans{}}
	s = &SessionState{}
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("%w: %v", errBadSnapshot, r)
		}
	}()
	d.value(reflect.ValueOf(s).Elem())
	if d.err == nil && len(d.buf) != 0 {
		d.fail("%d bytes after the state", len(d.buf))
	}
	if d.err != nil {
		return nil, d.err
	}
	if s.SessionID != id {
		return nil, fmt.Errorf("%w: the state of session %q", errBadSnapshot, s.SessionID)
	}
	if s.seen == nil {
		s.seen = map[string]struct{}{}
	}
	s.agents = as
	return s, nil
}

// structPlan is how the codec walks a struct type: per field, whether it skips
// it, and the arrays a slice field may be in (inlineArrays).
type structPlan struct {
	skip   []bool
	arrays [][]int
}

// plans memoizes the struct plans of one encoding or decoding.
type plans map[reflect.Type]*structPlan

func (ps plans) of(t reflect.Type) *structPlan {
	if p, ok := ps[t]; ok {
		return p
	}
	p := &structPlan{skip: make([]bool, t.NumField()), arrays: make([][]int, t.NumField())}
	for i := range t.NumField() {
		p.skip[i] = snapshotSkips(t.Field(i).Type)
		p.arrays[i] = inlineArrays(t, i)
	}
	ps[t] = p
	return p
}

// inlineArrays returns the array fields of struct t whose elements are of the
// type of field i's, a slice's: the arrays the slice may be in (loopState's
// calls in callBuf).
func inlineArrays(t reflect.Type, i int) []int {
	f := t.Field(i).Type
	if f.Kind() != reflect.Slice {
		return nil
	}
	var out []int
	for j := range t.NumField() {
		if g := t.Field(j).Type; g.Kind() == reflect.Array && g.Elem() == f.Elem() && !snapshotSkips(g) {
			out = append(out, j)
		}
	}
	return out
}

type ptrKey struct {
	addr uintptr
	t    reflect.Type
}

type stateEncoder struct {
	buf   []byte
	ptrs  map[ptrKey]uint64
	plans plans
	err   error
}

func (e *stateEncoder) uvarint(u uint64) { e.buf = binary.AppendUvarint(e.buf, u) }
func (e *stateEncoder) varint(i int64)   { e.buf = binary.AppendVarint(e.buf, i) }
func (e *stateEncoder) str(s string) {
	e.uvarint(uint64(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *stateEncoder) value(v reflect.Value) {
	if e.err != nil {
		return
	}
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			e.buf = append(e.buf, 1)
		} else {
			e.buf = append(e.buf, 0)
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		e.varint(v.Int())
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		e.uvarint(v.Uint())
	case reflect.Float32, reflect.Float64:
		e.uvarint(math.Float64bits(v.Float()))
	case reflect.String:
		e.str(v.String())
	case reflect.Slice:
		if v.IsNil() {
			e.uvarint(0)
			return
		}
		e.uvarint(uint64(v.Len()) + 1)
		if v.Type().Elem().Kind() == reflect.Uint8 {
			e.buf = append(e.buf, v.Bytes()...)
			return
		}
		for i := range v.Len() {
			e.value(v.Index(i))
		}
	case reflect.Array:
		for i := range v.Len() {
			e.value(v.Index(i))
		}
	case reflect.Map:
		if v.IsNil() {
			e.uvarint(0)
			return
		}
		e.uvarint(uint64(v.Len()) + 1)
		it := v.MapRange()
		for it.Next() {
			e.value(it.Key())
			e.value(it.Value())
		}
	case reflect.Struct:
		plan := e.plans.of(v.Type())
		for i := range v.NumField() {
			if plan.skip[i] {
				continue
			}
			f := v.Field(i)
			if arrays := plan.arrays[i]; len(arrays) > 0 {
				// A slice in an array beside it (its first elements, without an
				// allocation): which, and its length; the array holds its elements.
				j := slices.IndexFunc(arrays, func(j int) bool {
					g := v.Field(j)
					return f.Cap() > 0 && f.Pointer() == g.UnsafeAddr() && f.Cap() == g.Len()
				})
				e.uvarint(uint64(j + 1))
				if j >= 0 {
					e.uvarint(uint64(f.Len()))
					continue
				}
			}
			e.value(f)
		}
	case reflect.Pointer:
		if v.IsNil() {
			e.uvarint(0)
			return
		}
		k := ptrKey{v.Pointer(), v.Type()}
		if id, ok := e.ptrs[k]; ok {
			e.uvarint(1)
			e.uvarint(id)
			return
		}
		e.ptrs[k] = uint64(len(e.ptrs))
		e.uvarint(2)
		e.value(v.Elem())
	case reflect.Interface:
		if v.IsNil() {
			e.uvarint(0)
			return
		}
		i := slices.Index(snapshotRuns, v.Elem().Type())
		if i < 0 {
			e.err = fmt.Errorf("%w: a value of %s", errNoSnapshot, v.Elem().Type())
			return
		}
		e.uvarint(uint64(i) + 1)
		e.value(v.Elem())
	default:
		e.err = fmt.Errorf("%w: a value of %s", errNoSnapshot, v.Type())
	}
}

type stateDecoder struct {
	buf   []byte
	ptrs  []reflect.Value
	plans plans
	err   error
}

func (d *stateDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{errBadSnapshot}, args...)...)
	}
	d.buf = nil
}

func (d *stateDecoder) uvarint() uint64 {
	u, n := binary.Uvarint(d.buf)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return u
}

func (d *stateDecoder) varint() int64 {
	i, n := binary.Varint(d.buf)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.buf = d.buf[n:]
	return i
}

// length reads a length of at most the bytes left (each element takes one at
// least), so that a corrupt one allocates nothing large.
func (d *stateDecoder) length(u uint64) int {
	if u > uint64(len(d.buf)) {
		d.fail("length %d beyond the %d bytes left", u, len(d.buf))
		return 0
	}
	return int(u)
}

func (d *stateDecoder) bytes(n int) []byte {
	b := d.buf[:n:n]
	d.buf = d.buf[n:]
	return b
}

// settable returns v, or, for a field not exported, the same place written
// through.
func settable(v reflect.Value) reflect.Value {
	if v.CanSet() {
		return v
	}
	return reflect.NewAt(v.Type(), unsafe.Pointer(v.UnsafeAddr())).Elem()
}

func (d *stateDecoder) value(v reflect.Value) {
	if d.err != nil {
		return
	}
	v = settable(v)
	switch v.Kind() {
	case reflect.Bool:
		if len(d.buf) == 0 || d.buf[0] > 1 {
			d.fail("bad bool")
			return
		}
		v.SetBool(d.buf[0] == 1)
		d.buf = d.buf[1:]
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i := d.varint()
		if v.OverflowInt(i) {
			d.fail("%d overflows %s", i, v.Type())
			return
		}
		v.SetInt(i)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		u := d.uvarint()
		if v.OverflowUint(u) {
			d.fail("%d overflows %s", u, v.Type())
			return
		}
		v.SetUint(u)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(math.Float64frombits(d.uvarint()))
	case reflect.String:
		n := d.length(d.uvarint())
		v.SetString(string(d.bytes(n)))
	case reflect.Slice:
		u := d.uvarint()
		if u == 0 {
			return
		}
		n := d.length(u - 1)
		if v.Type().Elem().Kind() == reflect.Uint8 {
			v.SetBytes(bytes.Clone(d.bytes(n)))
			return
		}
		s := reflect.MakeSlice(v.Type(), n, n)
		for i := range n {
			d.value(s.Index(i))
		}
		v.Set(s)
	case reflect.Array:
		for i := range v.Len() {
			d.value(v.Index(i))
		}
	case reflect.Map:
		u := d.uvarint()
		if u == 0 {
			return
		}
		n := d.length(u - 1)
		m := reflect.MakeMapWithSize(v.Type(), n)
		for range n {
			k, x := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			d.value(k)
			d.value(x)
			if d.err != nil {
				return
			}
			m.SetMapIndex(k, x)
		}
		v.Set(m)
	case reflect.Struct:
		type alias struct{ slice, array, n int }
		var aliases []alias
		plan := d.plans.of(v.Type())
		for i := range v.NumField() {
			if plan.skip[i] {
				continue
			}
			f := v.Field(i)
			if arrays := plan.arrays[i]; len(arrays) > 0 {
				if j := d.uvarint(); j > 0 {
					if j > uint64(len(arrays)) {
						d.fail("bad inline array %d", j)
						return
					}
					aliases = append(aliases, alias{i, arrays[j-1], int(min(d.uvarint(), math.MaxInt32))})
					continue
				}
			}
			d.value(f)
		}
		for _, a := range aliases { // once the arrays are decoded
			g := settable(v.Field(a.array))
			if a.n > g.Len() {
				d.fail("inline slice of %d beyond its array's %d", a.n, g.Len())
				return
			}
			settable(v.Field(a.slice)).Set(g.Slice(0, a.n))
		}
	case reflect.Pointer:
		switch d.uvarint() {
		case 0:
		case 1:
			id := d.uvarint()
			if id >= uint64(len(d.ptrs)) || d.ptrs[id].Type() != v.Type() {
				d.fail("bad reference %d", id)
				return
			}
			v.Set(d.ptrs[id])
		case 2:
			p := reflect.New(v.Type().Elem())
			d.ptrs = append(d.ptrs, p)
			d.value(p.Elem())
			v.Set(p)
		default:
			d.fail("bad pointer tag")
		}
	case reflect.Interface:
		u := d.uvarint()
		if u == 0 {
			return
		}
		if u > uint64(len(snapshotRuns)) || !snapshotRuns[u-1].Implements(v.Type()) {
			d.fail("bad run type %d", u)
			return
		}
		x := reflect.New(snapshotRuns[u-1]).Elem()
		d.value(x)
		v.Set(x)
	default:
		d.fail("a value of %s", v.Type())
	}
}

// foldKey is what a snapshot's state depends on besides its events: the
// decision rules, the codec and layout, and the agents (their configurations,
// paradigms, compression, tools), digested.
type foldKey struct {
	Rules  int
	Codec  string
	Agents string
}

// snapshotKey returns the fold key of states of agents as; the zero key, which
// saves and uses no snapshot, when the running build cannot be told
// (snapshotBuild).
func snapshotKey(as *Agents) foldKey {
	build := snapshotBuild()
	if build == "" {
		return foldKey{}
	}
	return foldKey{Rules: ContextRules, Codec: snapshotLayout + "/" + build, Agents: agentsDigest(as)}
}

// snapshotBuild is a digest of the running executable, read once: a snapshot
// is used only by the build that saved it. The layout digest tells builds whose
// state has other fields apart, but not a fold changed with the same fields (a
// fix of how an event folds), whose old snapshots would hold what the new fold
// never makes; a deploy then folds each session's whole history once, as before
// snapshots, and saves a new one. "" when the executable cannot be read.
var snapshotBuild = sync.OnceValue(func() string {
	path, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
})

// agentsDigest digests as deterministically by reflection: what pointers point
// to (not where; a pointer back to one being digested only as such), maps in
// key order, a paradigm's concrete type and value, another interface's
// concrete type only (a tool catalog, a chain's tools: live objects, whose
// state is not the agent's configuration), and of a function only whether it
// is set.
func agentsDigest(as *Agents) string {
	h := sha256.New()
	var buf []byte
	onPath := map[ptrKey]bool{}
	var walk func(v reflect.Value, depth int)
	walk = func(v reflect.Value, depth int) {
		if depth > 64 {
			buf = append(buf, '~')
			return
		}
		buf = append(buf, byte(v.Kind()))
		switch v.Kind() {
		case reflect.Bool:
			buf = strconv.AppendBool(buf, v.Bool())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			buf = strconv.AppendInt(buf, v.Int(), 10)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
			buf = strconv.AppendUint(buf, v.Uint(), 10)
		case reflect.Float32, reflect.Float64:
			buf = strconv.AppendUint(buf, math.Float64bits(v.Float()), 16)
		case reflect.String:
			buf = strconv.AppendQuote(buf, v.String())
		case reflect.Slice, reflect.Array:
			if v.Kind() == reflect.Slice && v.IsNil() {
				buf = append(buf, 'n')
				return
			}
			buf = strconv.AppendInt(buf, int64(v.Len()), 10)
			for i := range v.Len() {
				walk(v.Index(i), depth+1)
			}
		case reflect.Map:
			if v.IsNil() {
				buf = append(buf, 'n')
				return
			}
			// Each entry digested apart, in the order of the digests: no map order.
			entries := make([]string, 0, v.Len())
			it := v.MapRange()
			for it.Next() {
				saved := buf
				buf = nil
				walk(it.Key(), depth+1)
				walk(it.Value(), depth+1)
				entries = append(entries, string(buf))
				buf = saved
			}
			sort.Strings(entries)
			for _, s := range entries {
				buf = strconv.AppendQuote(buf, s)
			}
		case reflect.Struct:
			buf = append(buf, v.Type().String()...)
			for i := range v.NumField() {
				walk(v.Field(i), depth+1)
			}
		case reflect.Pointer:
			if v.IsNil() {
				buf = append(buf, 'n')
				return
			}
			k := ptrKey{v.Pointer(), v.Type()}
			if onPath[k] {
				buf = append(buf, '^')
				return
			}
			onPath[k] = true
			walk(v.Elem(), depth+1)
			delete(onPath, k)
		case reflect.Interface:
			if v.IsNil() {
				buf = append(buf, 'n')
				return
			}
			buf = append(buf, v.Elem().Type().String()...)
			if v.Type() == typeParadigm {
				walk(v.Elem(), depth+1)
			}
		case reflect.Func, reflect.Chan, reflect.UnsafePointer:
			buf = strconv.AppendBool(buf, v.IsNil())
		}
		if len(buf) > 1<<16 {
			h.Write(buf)
			buf = buf[:0]
		}
	}
	walk(reflect.ValueOf(as).Elem(), 0)
	h.Write(buf)
	return hex.EncodeToString(h.Sum(nil))
}

// eventSum digests an event as stored: a snapshot names the event at its seq by
// ID and by this sum, so that another event at that seq with the same ID (a
// session pruned and begun again: decided events' IDs derive from their seq)
// does not pass for it.
func eventSum(e messages.Envelope) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%d\x00%s\x00%d\x00%s\x00%s\x00%d\x00%s\x00", e.ID, e.SessionID, e.Seq, e.Type, e.Version, e.CausationID, e.CorrelationID, e.TS, e.Actor)
	h.Write(e.Payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// EventSum is eventSum for the folds kept outside this package (the node's
// status reads): the check that the log's event at a fold's last seq is still
// the one folded.
func EventSum(e messages.Envelope) string { return eventSum(e) }

// stateSum is the checksum of an encoded state.
func stateSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
