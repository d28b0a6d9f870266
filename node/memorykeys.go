package node

import (
	"bytes"
	"encoding/json"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/troupe-run/troupe/memory"
)

// An Idempotency-Key of POST /v1/memories names one request: sent again with the
// same request it gets the first answer; sent with another request (other memories,
// another namespace, other metadata, tier or importance) it is refused, 422, and
// nothing is written. Each namespace a request writes to keeps the digest of the
// request beside the key in its events (memory.RequestKey), which holds across
// restarts and nodes. A namespace the key never wrote to cannot tell: the node
// remembers, besides, the digest of the request each recent key came with
// (requestKeys), so that a key sent again for another namespace is refused
// too, on the node that took it first, for requestKeyTTL.

// memoryRequestDigest is the digest of a request of POST /v1/memories: of its
// memories as decoded (memory.DecodeInputs), in order, each in the form its
// namespace stores it (canonicalInput), so that the same request written otherwise
// (with other whitespace, its fields or its metadata's keys in another order, a
// number as 1.0 for 1, a default given or left out) is the same request.
func memoryRequestDigest(inputs []memory.Input) string {
	vs := make([]any, len(inputs))
	for i, in := range inputs {
		vs[i] = canonicalInput(in)
	}
	return requestDigest(vs...)
}

// canonicalInput returns in (checked) with what a namespace stores it as where
// it could be written in more than one way (memory.Namespace.Add): the content,
// outcome and URI trimmed, the importance's default, the text modality's name, the
// timestamp in UTC to the microsecond, the participants trimmed and each once,
// the metadata as canonical JSON (canonicalJSON), an empty object as none.
func canonicalInput(in memory.Input) memory.Input {
	in.Content, in.Outcome, in.URI = strings.TrimSpace(in.Content), strings.TrimSpace(in.Outcome), strings.TrimSpace(in.URI)
	imp := memory.DefaultImportance
	if in.Importance != nil {
		imp = *in.Importance + 0 // -0 is 0
	}
	in.Importance = &imp
	if mod, err := memory.ParseModality(in.Modality); err == nil {
		in.Modality = string(mod)
	}
	if in.Timestamp != "" {
		if ts, err := time.Parse(time.RFC3339Nano, in.Timestamp); err == nil {
			in.Timestamp = ts.UTC().Truncate(time.Microsecond).Format(time.RFC3339Nano)
		}
	}
	var parts []string
	for _, p := range in.Participants {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(parts, p) {
			parts = append(parts, p)
		}
	}
	in.Participants = parts
	if len(in.Metadata) > 0 {
		if c, err := canonicalJSON(in.Metadata); err == nil {
			in.Metadata = c
		}
		if string(in.Metadata) == "{}" {
			in.Metadata = nil
		}
	}
	return in
}

// canonicalJSON returns the JSON value raw in one form of all those that write it:
// compact, object keys sorted, strings escaped alike, numbers by value (1, 1.0,
// 1e0 and 10E-1 are 1; digits a float64 would round are kept).
func canonicalJSON(raw []byte) ([]byte, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(canonicalNumbers(v))
}

// canonicalNumbers replaces, in place, the numbers of v (json.Numbers) by
// canonicalNumber's form of them.
func canonicalNumbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		return canonicalNumber(string(x))
	case map[string]any:
		for k, e := range x {
			x[k] = canonicalNumbers(e)
		}
	case []any:
		for i, e := range x {
			x[i] = canonicalNumbers(e)
		}
	}
	return v
}

// canonicalNumber writes the JSON number s as its significant digits, without
// leading or trailing zeros, and the power of ten they are multiplied by: "1.50e2"
// is "15e1", "0.0" and "-0" are "0". The value is kept exactly, whatever its size.
func canonicalNumber(s string) json.Number {
	neg := strings.HasPrefix(s, "-")
	mant, exp, _ := strings.Cut(strings.ToLower(strings.TrimPrefix(s, "-")), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return "0"
	}
	e := new(big.Int)
	if exp != "" {
		if _, ok := e.SetString(exp, 10); !ok {
			return json.Number(s)
		}
	}
	sig := strings.TrimRight(digits, "0")
	e.Add(e, big.NewInt(int64(len(digits)-len(sig)-len(frac))))
	out := sig
	if e.Sign() != 0 {
		out += "e" + e.String()
	}
	if neg {
		out = "-" + out
	}
	return json.Number(out)
}
