package telemetry

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"testing"
)

// An attribute value limit the environment sets is kept; one that is empty, or
// not a number, keeps DefaultAttributeValueLimit and is named in a warning rather
// than lifting the bound (the SDK reads a bad value as "no limit").
func TestSpanLimitsOfABadEnvironmentKeepTheDefault(t *testing.T) {
	for _, c := range []struct {
		span, all string
		set       [2]bool
		want      int
		warn      string
	}{
		{want: DefaultAttributeValueLimit},
		{span: "100", set: [2]bool{true, false}, want: 100},
		{span: " 100 ", set: [2]bool{true, false}, want: 100},
		{all: "200", set: [2]bool{false, true}, want: 200},
		{span: "-1", set: [2]bool{true, false}, want: -1},
		{span: "100", all: "200", set: [2]bool{true, true}, want: 100},
		{span: "", set: [2]bool{true, false}, want: DefaultAttributeValueLimit},
		{span: "", all: "300", set: [2]bool{true, true}, want: 300},
		{span: "4k", set: [2]bool{true, false}, want: DefaultAttributeValueLimit, warn: "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"},
		{all: "lots", set: [2]bool{false, true}, want: DefaultAttributeValueLimit, warn: "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT"},
		{span: "abc", all: "300", set: [2]bool{true, true}, want: DefaultAttributeValueLimit, warn: "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"},
		{span: "99999999999999999999", set: [2]bool{true, false}, want: DefaultAttributeValueLimit, warn: "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT"},
	} {
		t.Run(c.span+"|"+c.all, func(t *testing.T) {
			for i, kv := range [2][2]string{{"OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", c.span}, {"OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", c.all}} {
				t.Setenv(kv[0], kv[1])
				if !c.set[i] {
					_ = os.Unsetenv(kv[0]) // t.Setenv sets it back after
				}
			}
			var logs bytes.Buffer
			l := spanLimits(slog.New(slog.NewTextHandler(&logs, nil)))
			if l.AttributeValueLengthLimit != c.want {
				t.Errorf("span %q, all %q: attribute value limit %d, want %d", c.span, c.all, l.AttributeValueLengthLimit, c.want)
			}
			switch {
			case c.warn == "" && logs.Len() != 0:
				t.Errorf("span %q, all %q: logged %s", c.span, c.all, logs.String())
			case c.warn != "" && (!strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), c.warn)):
				t.Errorf("span %q, all %q: logged %q, want a warning naming %s", c.span, c.all, logs.String(), c.warn)
			}
		})
	}
}
