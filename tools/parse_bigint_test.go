package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools"
)

// An integer written without a fraction or an exponent that neither int64 nor
// float64 holds as written is refused, naming the field, instead of reaching the
// tool rounded (10000000000000000001 as 10000000000000000000); one that float64
// holds as written, and one in exponent form, pass.
func TestArgumentIntegersAreNotRoundedSilently(t *testing.T) {
	var got []uint64
	f := tools.MustFunc("ids", "Takes an ID.", func(_ context.Context, a struct {
		ID uint64 `json:"id"`
	}) (string, error) {
		got = append(got, a.ID)
		return "ok", nil
	})
	for _, args := range []string{`{"id":10000000000000000001}`, `{"id":18446744073709551615}`, `id=10000000000000000001`} {
		_, err := f.Call(context.Background(), tools.Call{Arguments: args})
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), `"id" is the integer 10000000000000000001, which cannot be passed on exactly`) &&
			!strings.Contains(err.Error(), `"id" is the integer 18446744073709551615, which cannot be passed on exactly`) && !strings.Contains(err.Error(), `"id" must be an integer`) {
			t.Errorf("%s: %v", args, err)
		}
	}
	if len(got) != 0 {
		t.Errorf("the function got %v", got)
	}
	if out, err := f.Call(context.Background(), tools.Call{Arguments: `{"id":1e19}`}); err != nil || out != "ok" || got[0] != 1e19 {
		t.Errorf("1e19: %q, %v, %v", out, err, got)
	}
	p, err := tools.NewArgumentParser("raw", json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"},"x":{"type":"number"},"m":{"type":"object"}}}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	for args, want := range map[string]string{
		`{"n":9223372036854775807,"x":100000000000000000000,"m":{"k":-9223372036854775808}}`: `{"m":{"k":-9223372036854775808},"n":9223372036854775807,"x":100000000000000000000}`,
		`{"x":1.5e19}`: `{"x":15000000000000000000}`,
	} {
		if out, err := p.ParseJSON(args); err != nil || string(out) != want {
			t.Errorf("%s = %s, %v; want %s", args, out, err, want)
		}
	}
	for args, field := range map[string]string{`{"n":9223372036854775808}`: "n", `{"x":12345678901234567890123}`: "x", `{"m":{"k":-9223372036854775809}}`: "m.k"} {
		if out, err := p.ParseJSON(args); !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), `"`+field+`" is the integer`) {
			t.Errorf("%s = %s, %v; want an error naming %s", args, out, err, field)
		}
	}
}
