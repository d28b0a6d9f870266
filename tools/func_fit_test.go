package tools_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// An integer the schema takes (1e19 is an integer, and an int64 or uint64 field
// has no bounds in its schema) but the function's Go type cannot hold reaches the
// model as the field and the range it must be in, as a schema's bounds are said,
// not in the decoder's words about Go struct fields and types.
func TestIntegerBeyondTheArgumentsGoTypeNamesTheFieldAndRange(t *testing.T) {
	f := tools.MustFunc("read", "Reads from an offset.", func(_ context.Context, a struct {
		Offset int64 `json:"offset,omitempty"`
		Inner  struct {
			ID uint64 `json:"id,omitempty"`
		} `json:"inner,omitempty"`
	}) (string, error) {
		return "ok", nil
	})
	for args, want := range map[string]string{
		`{"offset":1e19}`:         `"offset" must be an integer from -9223372036854775808 to 9223372036854775807, not 10000000000000000000`,
		`{"offset":-1e19}`:        `"offset" must be an integer from -9223372036854775808 to 9223372036854775807, not -10000000000000000000`,
		`{"inner":{"id":1e20}}`:   `"inner.id" must be an integer from 0 to 18446744073709551615, not 100000000000000000000`,
		`{"offset":-9e18}`:        "",
		`{"inner":{"id":1.8e19}}`: "",
	} {
		out, err := f.Call(context.Background(), tools.Call{Arguments: args})
		if want == "" {
			if err != nil || out != "ok" {
				t.Errorf("%s: %q, %v", args, out, err)
			}
			continue
		}
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "Go struct") {
			t.Errorf("%s: %v\nwant %s", args, err, want)
		}
	}
}
