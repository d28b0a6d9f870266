package clickhouse

import "testing"

func TestCanonicalPosition(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want position
		ok   bool
	}{
		{"s-1/2", position{"s-1", 2}, true},
		{"a/b/7", position{"a/b", 7}, true},
		{"/3", position{"", 3}, true},
		{"s-1/0", position{}, false},
		{"s-1/07", position{}, false},
		{"s-1/+7", position{}, false},
		{"s-1/2/writer-3", position{}, false},
		{"s-1/18446744073709551616", position{}, false},
		{"no-slash", position{}, false},
	} {
		got, ok := canonicalPosition(tc.id)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("canonicalPosition(%q) = %+v, %v; want %+v, %v", tc.id, got, ok, tc.want, tc.ok)
		}
		if ok && canonicalID(got) != tc.id {
			t.Errorf("canonicalID(%+v) = %q, want %q", got, canonicalID(got), tc.id)
		}
	}
}
