//go:build review

package tools_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// Two fields that break a rule the validator checks (a pattern) are refused with
// the same error every time.
func TestArgumentValidatorProblemsAreInAFixedOrder(t *testing.T) {
	var props []string
	for i := range 8 {
		props = append(props, fmt.Sprintf(`"f%d":{"type":"string","pattern":"^x$"}`, i))
	}
	p, err := tools.NewArgumentParser("pat", []byte(`{"type":"object","properties":{`+strings.Join(props, ",")+`}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	args := `{"f0":"y","f1":"y","f2":"y","f3":"y","f4":"y","f5":"y","f6":"y","f7":"y"}`
	seen := map[string]bool{}
	for range 50 {
		_, err := p.Parse(args)
		if err == nil {
			t.Fatal("the patterns were not checked")
		}
		seen[err.Error()] = true
	}
	if len(seen) != 1 {
		for e := range seen {
			t.Log(e)
		}
		t.Fatalf("the same arguments were refused with %d different errors", len(seen))
	}
}
