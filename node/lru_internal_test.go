package node

import "testing"

// An lru drops the least recently used past its max: a get makes a key the most
// recently used, a peek does not.
func TestLRUDropsTheLeastRecentlyUsed(t *testing.T) {
	var c lru[int]
	for i, k := range []string{"a", "b", "c"} {
		if _, dropped := c.put(k, i, 3); dropped {
			t.Fatalf("put %s dropped one of 3", k)
		}
	}
	c.get("a")  // b is now the least recently used
	c.peek("b") // and stays so
	if v, dropped := c.put("d", 3, 3); !dropped || v != 1 {
		t.Fatalf("put d dropped %d, %v; want b's 1", v, dropped)
	}
	if _, ok := c.peek("b"); ok || c.len() != 3 {
		t.Fatalf("b held %v, len %d; want b dropped, 3 held", ok, c.len())
	}
	c.remove("c")
	if k, _, _ := c.dropOldest(); k != "a" {
		t.Fatalf("oldest %q, want a", k)
	}
	if k, _, _ := c.dropOldest(); k != "d" || c.len() != 0 {
		t.Fatalf("oldest %q, len %d; want d, 0", k, c.len())
	}
}
