package consolidator

import (
	"math"
	"strconv"
	"time"
)

// The numbers of a reason are rounded for reading (2 decimals, ages 1 decimal) but
// never so far that a comparison reads false: "0.2 < 0.2" becomes "0.199 < 0.2".

// num formats v with dec decimals, trailing zeros dropped.
func num(v float64, dec int) string {
	p := math.Pow(10, float64(dec))
	return strconv.FormatFloat(math.Round(v*p)/p, 'f', -1, 64)
}

// pair formats a and b with dec decimals or more, until they read differently (a
// comparison between them is strict) or up to 9 decimals.
func pair(a, b float64, dec int) (string, string) {
	for {
		sa, sb := num(a, dec), num(b, dec)
		if sa != sb || a == b || dec >= 9 {
			return sa, sb
		}
		dec++
	}
}

// atLeast formats a and b for "a ≥ b", which holds: rounding keeps it true.
func atLeast(a, b float64) (string, string) { return num(a, 2), num(b, 2) }

// ages formats an age (in nanoseconds, span) and a limit in the limit's unit
// (days, hours, minutes or seconds): "45d", "30d".
func ages(age float64, limit time.Duration) (string, string) {
	unit, suffix := time.Second, "s"
	switch {
	case limit >= day && limit%day == 0:
		unit, suffix = day, "d"
	case limit >= time.Hour && limit%time.Hour == 0:
		unit, suffix = time.Hour, "h"
	case limit >= time.Minute && limit%time.Minute == 0:
		unit, suffix = time.Minute, "m"
	}
	a, b := pair(age/float64(unit), float64(limit)/float64(unit), 1)
	return a + suffix, b + suffix
}

// span is now − at in nanoseconds, as a float: unlike time.Time.Sub, it does not
// saturate at about 292 years, so that a reason says the age of a memory of any
// time (a timestamp may be from the year 1 on).
func span(now, at time.Time) float64 {
	return float64(now.Unix()-at.Unix())*1e9 + float64(now.Nanosecond()-at.Nanosecond())
}
