package tools_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // zone names resolve the same on every machine

	"github.com/troupe-run/troupe/tools"
)

type fixedTime time.Time

func (f fixedTime) Now() time.Time { return time.Time(f) }

func TestClock(t *testing.T) {
	at := fixedTime(time.Date(2026, 11, 29, 23, 10, 0, 123456789, time.UTC))
	clock := tools.NewClock(at)
	for _, tc := range []struct{ args, want string }{
		{``, "2026-11-29T23:10:00Z (Sunday)"},
		{`  `, "2026-11-29T23:10:00Z (Sunday)"},
		{`{}`, "2026-11-29T23:10:00Z (Sunday)"},
		{`null`, "2026-11-29T23:10:00Z (Sunday)"},
		{`{"timezone": ""}`, "2026-11-29T23:10:00Z (Sunday)"},
		{`{"timezone": "UTC"}`, "2026-11-29T23:10:00Z (Sunday)"},
		{`{"timezone": "utc"}`, "2026-11-29T23:10:00Z (Sunday)"},
		{`{"timezone": "Europe/Paris"}`, "2026-11-30T00:10:00+01:00 (Monday)"},
		{`{"timezone": " America/New_York "}`, "2026-11-29T18:10:00-05:00 (Sunday)"},
		{`{"timezone": "Asia/Kolkata"}`, "2026-11-30T04:40:00+05:30 (Monday)"},
		{`{"timezone": "Etc/GMT+12"}`, "2026-11-29T11:10:00-12:00 (Sunday)"},
	} {
		got, err := clock.Call(context.Background(), tools.Call{Arguments: tc.args})
		if err != nil || got != tc.want {
			t.Errorf("%q: %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
}

func TestClockRejectsBadArguments(t *testing.T) {
	clock := tools.NewClock(fixedTime(time.Unix(0, 0)))
	for _, tc := range []struct{ args, want string }{
		{`{"timezone": "Europe/Pari"}`, `unknown time zone "Europe/Pari"`},
		{`{"timezone": "Local"}`, `"Local" is not allowed`},
		{`{"timezone": "../../etc/passwd"}`, "unknown time zone"},
		{`{"timezone": "/etc/localtime"}`, "unknown time zone"},
		{`{"timezone": "` + strings.Repeat("A", 65) + `"}`, "too long"},
		{`{"timezone": 1}`, `unknown time zone "1"`}, // the number taken as its text
		{`{"timezone": ["UTC"]}`, `"timezone" must be a string, not an array`},
		{`{"tz": "UTC"}`, `unknown field "tz"`},
		{`{"timezone": "UTC", "timezone": "Local"}`, `the key "timezone" appears twice`},
		{`{"timezone": "UTC"`, "malformed JSON"},
		{`Europe/Paris`, "neither a JSON object nor key=value pairs"},
	} {
		_, err := clock.Call(context.Background(), tools.Call{Arguments: tc.args})
		if !errors.Is(err, tools.ErrInvalidArguments) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an ErrInvalidArguments containing %q", tc.args, err, tc.want)
		}
	}
}

func TestClockUsesSystemTimeByDefault(t *testing.T) {
	for _, c := range []tools.Tool{tools.NewClock(nil), &tools.Clock{}} {
		before := time.Now().Add(-time.Second)
		got, err := c.Call(context.Background(), tools.Call{})
		if err != nil {
			t.Fatal(err)
		}
		ts, err := time.Parse(time.RFC3339, strings.Fields(got)[0])
		if err != nil {
			t.Fatalf("%q: %v", got, err)
		}
		if ts.Before(before.Truncate(time.Second)) || ts.After(time.Now().Add(time.Second)) {
			t.Errorf("system clock said %s", got)
		}
	}
}

func TestClockSpec(t *testing.T) {
	spec := tools.NewClock(nil).Spec()
	if spec.Name != "clock" || !strings.Contains(string(spec.Parameters), `"timezone"`) {
		t.Errorf("spec %+v", spec)
	}
}

func ExampleClock() {
	at := fixedTime(time.Date(2026, 11, 29, 23, 10, 0, 0, time.UTC))
	clock := tools.NewClock(at) // replay and tests inject the time
	out, _ := clock.Call(context.Background(), tools.Call{Arguments: `{"timezone": "Europe/Paris"}`})
	fmt.Println(out)
	// Output:
	// 2026-11-30T00:10:00+01:00 (Monday)
}
