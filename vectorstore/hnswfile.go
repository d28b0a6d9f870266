package vectorstore

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// The graph file of an Embedded store with Index IndexHNSW (Path + ".hnsw").
//
// It is a cache, not a source of truth: the log alone says what the store holds. The
// file starts with an 8-byte magic ("TRVSHNS" and a version byte) and holds one
// record per collection, framed like log records (length, CRCs), whose payload is
// the collection name, dimension, M, the node count, the entry node (index + 1, 0
// for none), then per node its ID, the CRC-32C of its unit vector, its level and,
// per layer, its links as node indexes. Strings and counts are uvarints as in the log.
//
// Open replays the log, then loads the graph and reconciles it with the items by ID:
// a node whose item is gone or whose vector changed (its CRC differs) is unlinked as
// a delete would unlink it, and items without a node are inserted. So a graph saved
// before later writes (a crash skips the save of Close) costs only the work of those
// writes, and a missing, stale or damaged file costs a rebuild, never a wrong result:
// search scores come from the items, and a search that the graph cannot answer in
// full falls back to an exact scan.

// Version 2 links a node to at most one other copy of its vector (graph.go): a
// graph of version 1 could cut many copies of one vector off from the rest, and
// is rebuilt on Open.
const graphMagic = "TRVSHNS\x02"

// Writes save the graphs once graphSaveMin nodes, and 1/graphSaveShare of all
// nodes, changed since the last save (Close saves in any case). A crash thus leaves
// at most that much to redo on Open (seconds at 100k items), and saving (about 0.1 s
// per 100k nodes) costs a few percent of the inserts between two saves.
const (
	graphSaveMin   = 4096
	graphSaveShare = 16
)

func graphPath(path string) string { return path + ".hnsw" }

// unitCRC is the checksum that ties a saved node to its item's vector.
func unitCRC(v []float32, buf []byte) (uint32, []byte) {
	buf = buf[:0]
	for _, x := range v {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(x))
	}
	return crc32.Checksum(buf, castagnoli), buf
}

func encodeGraph(b []byte, name string, c *collection) []byte {
	g := c.g
	index := make([]int, len(g.levels)) // slot -> node index
	n := 0
	for s, lv := range g.levels {
		if lv >= 0 {
			index[s] = n
			n++
		}
	}
	b = appendString(b, name)
	b = binary.AppendUvarint(b, uint64(c.dim))
	b = binary.AppendUvarint(b, uint64(g.cfg.M))
	b = binary.AppendUvarint(b, uint64(n))
	if g.entry >= 0 {
		b = binary.AppendUvarint(b, uint64(index[g.entry]+1))
	} else {
		b = binary.AppendUvarint(b, 0)
	}
	var buf []byte
	var sum uint32
	for s, lv := range g.levels {
		if lv < 0 {
			continue
		}
		b = appendString(b, c.items[s].ID)
		sum, buf = unitCRC(c.vec(s), buf)
		b = binary.LittleEndian.AppendUint32(b, sum)
		b = append(b, byte(lv))
		for l := 0; l <= int(lv); l++ {
			lst := g.linksAt(s, l)
			b = binary.AppendUvarint(b, uint64(len(lst)))
			for _, x := range lst {
				b = binary.AppendUvarint(b, uint64(index[x]))
			}
		}
	}
	return b
}

// savedGraph is one decoded record of the graph file.
type savedGraph struct {
	name   string
	dim, m int
	entry  int // -1: none
	ids    []string
	crcs   []uint32
	levels []int8
	links  [][][]int32 // node index -> layer -> node indexes
}

func decodeGraph(p []byte) (savedGraph, error) {
	d := &decoder{b: p}
	var sg savedGraph
	sg.name = d.str()
	sg.dim = int(d.uvarint())
	sg.m = int(d.uvarint())
	n := d.count(1 + 4 + 1 + 1)
	entry := d.uvarint()
	if d.err != nil {
		return sg, d.err
	}
	if entry > uint64(n) {
		return sg, fmt.Errorf("entry node %d of %d", entry, n)
	}
	sg.entry = int(entry) - 1
	sg.ids = make([]string, n)
	sg.crcs = make([]uint32, n)
	sg.levels = make([]int8, n)
	sg.links = make([][][]int32, n)
	for i := range n {
		sg.ids[i] = d.str()
		raw := d.take(5)
		if d.err != nil {
			return sg, d.err
		}
		sg.crcs[i] = binary.LittleEndian.Uint32(raw)
		if raw[4] > maxHNSWLevel {
			return sg, fmt.Errorf("node %d has level %d", i, raw[4])
		}
		sg.levels[i] = int8(raw[4])
		sg.links[i] = make([][]int32, raw[4]+1)
		for l := range sg.links[i] {
			cnt := d.count(1)
			lst := make([]int32, 0, cnt)
			for range cnt {
				x := d.uvarint()
				if d.err == nil && x >= uint64(n) {
					return sg, fmt.Errorf("node %d links to node %d of %d", i, x, n)
				}
				lst = append(lst, int32(x))
			}
			sg.links[i][l] = lst
		}
	}
	if d.err != nil {
		return sg, d.err
	}
	if len(d.b) != 0 {
		return sg, fmt.Errorf("%d unexpected bytes after the graph", len(d.b))
	}
	// A search follows a link on layer l to the target's links on layer l, and starts
	// from the entry at the top: check the shape a search relies on.
	for i, layers := range sg.links {
		for l, lst := range layers {
			for _, x := range lst {
				if int(sg.levels[x]) < l {
					return sg, fmt.Errorf("node %d links on layer %d to node %d of level %d", i, l, x, sg.levels[x])
				}
			}
		}
		if sg.entry < 0 || sg.levels[i] > sg.levels[sg.entry] {
			return sg, fmt.Errorf("node %d is above the entry node", i)
		}
	}
	return sg, nil
}

// saveGraphs writes the graphs of every collection to a new file and renames it over
// the graph file. The caller holds wmu, so the graphs cannot change meanwhile.
func (s *Embedded) saveGraphs() error {
	if s.file == nil || s.cfg.Index != IndexHNSW {
		return nil
	}
	path := graphPath(s.cfg.Path)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("vectorstore: save graphs: %w", err)
	}
	err = func() error {
		if _, err := f.Write([]byte(graphMagic)); err != nil {
			return err
		}
		var payload []byte
		for _, name := range slices.Sorted(maps.Keys(s.colls)) {
			c := s.colls[name]
			if c.g == nil {
				continue
			}
			payload = encodeGraph(payload[:0], name, c)
			if len(payload) > maxRecordSize {
				return fmt.Errorf("graph of %q encodes to %d bytes, more than %d", name, len(payload), maxRecordSize)
			}
			if _, err := f.Write(frame(payload)); err != nil {
				return err
			}
		}
		return f.Sync()
	}()
	err = errors.Join(err, f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("vectorstore: save graphs: %w", err)
	}
	for _, c := range s.colls {
		if c.g != nil {
			c.g.changes = 0
		}
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("vectorstore: save graphs: %w", err)
	}
	return nil
}

// autoSaveGraphs saves the graphs when many nodes changed since the last save. A
// failure is only logged: the log holds the data, and the next save retries.
func (s *Embedded) autoSaveGraphs() {
	if s.file == nil || s.cfg.Index != IndexHNSW {
		return
	}
	changes, nodes := 0, 0
	for _, c := range s.colls {
		if c.g != nil {
			changes += c.g.changes
			nodes += len(c.slot)
		}
	}
	if changes < graphSaveMin || changes < nodes/graphSaveShare {
		return
	}
	if err := s.saveGraphs(); err != nil {
		s.cfg.Logger.Warn("vectorstore: saving the HNSW graphs failed; the next Open rebuilds what changed",
			"path", s.cfg.Path, "error", err)
	}
}

// readGraphs reads the graph file; a missing file is no graphs, a damaged one is
// reported (the caller rebuilds).
func (s *Embedded) readGraphs() (map[string]savedGraph, error) {
	path := graphPath(s.cfg.Path)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	magic := make([]byte, len(graphMagic))
	if _, err := f.ReadAt(magic, 0); err != nil || string(magic) != graphMagic {
		if err == nil && string(magic[:len(magic)-1]) == graphMagic[:len(graphMagic)-1] && magic[len(magic)-1] < graphMagic[len(graphMagic)-1] {
			return nil, fmt.Errorf("%s is a graph file of version %d, whose links this build (version %d) does not take: it rebuilds them once",
				path, magic[len(magic)-1], graphMagic[len(graphMagic)-1])
		}
		return nil, fmt.Errorf("%s is not a graph file of this version", path)
	}
	out := make(map[string]savedGraph)
	res, err := scanLog(f, st.Size(), func(off int64, payload []byte) error {
		sg, err := decodeGraph(payload)
		if err != nil {
			return fmt.Errorf("record at offset %d: %w", off, err)
		}
		out[sg.name] = sg
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res.torn {
		return nil, fmt.Errorf("%s ends in a torn record", path)
	}
	return out, nil
}

// buildGraphs gives every collection its graph after the log was replayed: loaded
// from the graph file and reconciled with the items where possible, built otherwise.
func (s *Embedded) buildGraphs() {
	var saved map[string]savedGraph
	if s.file != nil {
		var err error
		saved, err = s.readGraphs()
		if err != nil {
			s.cfg.Logger.Warn("vectorstore: ignoring the HNSW graph file; rebuilding the graphs",
				"path", s.cfg.Path, "error", err)
			saved = nil
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.colls)) {
		c := s.colls[name]
		c.g = newGraph(s.cfg.HNSW)
		c.g.grow(len(c.items))
		if sg, ok := saved[name]; ok && sg.dim == c.dim && sg.m == s.cfg.HNSW.M {
			c.loadGraph(sg)
		}
		for slot, it := range c.items {
			if it.ID != "" && c.g.levels[slot] < 0 {
				c.graphInsert(slot)
			}
		}
	}
}

// loadGraph installs a saved graph in an empty one, keeping the nodes whose item
// still exists with the same vector and unlinking the others.
func (c *collection) loadGraph(sg savedGraph) {
	g := c.g
	n := len(sg.ids)
	// Node index -> slot, or -(index+1) for a node whose item is gone or changed.
	slotOf := make([]int32, n)
	var buf []byte
	var sum uint32
	dead := 0
	for i, id := range sg.ids {
		slotOf[i] = -int32(i) - 1
		s, ok := c.slot[id]
		if !ok || g.levels[s] >= 0 {
			dead++
			continue
		}
		if sum, buf = unitCRC(c.vec(s), buf); sum != sg.crcs[i] {
			dead++
			continue
		}
		slotOf[i] = int32(s)
		g.levels[s] = sg.levels[i]
	}
	translate := func(lst []int32) []int32 {
		out := make([]int32, len(lst), len(lst)+1)
		for j, x := range lst {
			out[j] = slotOf[x]
		}
		return out
	}
	for i, s := range slotOf {
		if s >= 0 {
			g.initNode(int(s), int(sg.levels[i]))
			for l, lst := range sg.links[i] {
				g.setLinks(int(s), l, translate(lst))
			}
		}
	}
	g.entry = -1
	if sg.entry >= 0 {
		g.entry = slotOf[sg.entry]
		if g.entry >= 0 {
			g.top = int(g.levels[g.entry])
		}
	}
	if dead > 0 || g.entry < 0 {
		deadLinks := func(d int32, l int) []int32 {
			if i := -d - 1; l < len(sg.links[i]) {
				return translate(sg.links[i][l])
			}
			return nil
		}
		c.graphRepair(nil, deadLinks)
	}
	g.changes = dead
}
