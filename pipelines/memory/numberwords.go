package memory

import (
	"strconv"
	"strings"
	"unicode"
)

// numberWord is what one English number word says: its value, and how it joins
// the words around it into one number.
type numberWord struct {
	value int64
	kind  numberKind
	// ordinal ends the number it closes ("twenty-first", "the third two").
	ordinal bool
}

type numberKind int

const (
	smallNumber   numberKind = iota // zero to nineteen
	tensNumber                      // twenty, thirty, … ninety
	hundredNumber                   // hundred
	scaleNumber                     // thousand, million, billion
	dozenNumber                     // dozen
)

// numberWords are the English words of a number: cardinals and ordinals from
// zero to nineteen, the tens, hundred, thousand, million, billion, and dozen.
var numberWords = func() map[string]numberWord {
	m := map[string]numberWord{}
	for i, w := range strings.Fields(`zero one two three four five six seven eight nine ten eleven twelve
		thirteen fourteen fifteen sixteen seventeen eighteen nineteen`) {
		m[w] = numberWord{value: int64(i), kind: smallNumber}
	}
	for i, w := range strings.Fields(`first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth
		thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth`) {
		m[w] = numberWord{value: int64(i + 1), kind: smallNumber, ordinal: true}
	}
	for i, w := range strings.Fields(`twenty thirty forty fifty sixty seventy eighty ninety`) {
		m[w] = numberWord{value: int64(20 + 10*i), kind: tensNumber}
	}
	for i, w := range strings.Fields(`twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth`) {
		m[w] = numberWord{value: int64(20 + 10*i), kind: tensNumber, ordinal: true}
	}
	m["hundred"] = numberWord{value: 100, kind: hundredNumber}
	m["hundredth"] = numberWord{value: 100, kind: hundredNumber, ordinal: true}
	for w, v := range map[string]int64{"thousand": 1e3, "million": 1e6, "billion": 1e9} {
		m[w] = numberWord{value: v, kind: scaleNumber}
		m[w+"th"] = numberWord{value: v, kind: scaleNumber, ordinal: true}
	}
	m["dozen"] = numberWord{value: 12, kind: dozenNumber}
	return m
}()

// notANumber are the words before which "one" is a pronoun, not a number ("no
// one", "any one", "each one", …); "one another" is one too.
var notANumber = map[string]bool{"no": true, "any": true, "every": true, "each": true, "some": true,
	"which": true, "this": true, "that": true}

// numberWordValues returns the values, in digits, of the numbers text writes in
// English words. Words of one number (joined by spaces or hyphens, an "and" after
// a hundred or a thousand) are read as one: "twenty-one" is 21, "one hundred and
// five" 105, "two thousand" 2000, "a dozen" 12, "two dozen" 24; a year read in
// pairs, "nineteen ninety-five", 1995; "twenty-first" 21. Words that do not join
// ("one two", "twenty twenty" apart from a year, a comma between) are numbers of
// their own.
func numberWordValues(text string) []string {
	type token struct {
		w      string
		joined bool // only spaces or hyphens since the word before
	}
	var toks []token
	var b strings.Builder
	joined, gap := false, ""
	end := func() {
		if b.Len() > 0 {
			toks = append(toks, token{w: strings.Trim(b.String(), "'’"), joined: joined})
			b.Reset()
			joined, gap = true, ""
		}
	}
	for _, r := range strings.ToLower(text) {
		if unicode.IsLetter(r) || r == '\'' || r == '’' {
			if b.Len() == 0 && gap != "" && strings.TrimFunc(gap, func(r rune) bool { return unicode.IsSpace(r) || r == '-' || r == '‐' }) != "" {
				joined = false
			}
			b.WriteRune(r)
			continue
		}
		end()
		gap += string(r)
	}
	end()

	var out []string
	var total, cur int64
	var last numberWord
	in, year := false, false
	flush := func() {
		if in {
			out = append(out, strconv.FormatInt(total+cur, 10))
		}
		total, cur, in, year = 0, 0, false, false
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		nw, ok := numberWords[t.w]
		if ok && t.w == "one" && ((i > 0 && notANumber[toks[i-1].w]) || (i+1 < len(toks) && toks[i+1].w == "another")) {
			ok = false
		}
		if !ok {
			if t.w == "and" && t.joined && in && (last.kind == hundredNumber || last.kind == scaleNumber) && i+1 < len(toks) && toks[i+1].joined {
				if next, ok := numberWords[toks[i+1].w]; ok && next.kind <= tensNumber {
					continue
				}
			}
			flush()
			continue
		}
		if in && !t.joined && !(i > 0 && toks[i-1].w == "and") {
			flush()
		}
		if !in {
			in, last = true, numberWord{kind: -1}
		}
		switch nw.kind {
		case smallNumber, tensNumber:
			tail := cur % 100
			switch {
			case last.kind == -1 || last.kind == hundredNumber || last.kind == scaleNumber:
				cur += nw.value
			case last.kind == tensNumber && nw.kind == smallNumber && nw.value > 0 && nw.value < 10 && tail%10 == 0:
				cur += nw.value
			case !year && total == 0 && cur >= 10 && cur < 100 && nw.value >= 10:
				// a year in pairs: "nineteen ninety", "twenty twenty-six"
				cur, year = cur*100+nw.value, true
			default:
				flush()
				in, cur = true, nw.value
			}
		case hundredNumber:
			if last.kind == hundredNumber || year {
				flush()
				in = true
			}
			if cur == 0 {
				cur = 1
			}
			cur *= 100
		case scaleNumber:
			if total >= nw.value && total+cur >= 1e9 { // past what a scale word goes on with
				flush()
				in = true
			}
			if total > 0 && total < nw.value {
				total = (total + cur) * nw.value // "two thousand million"
			} else {
				total += max(cur, 1) * nw.value
			}
			cur = 0
		case dozenNumber:
			if cur == 0 {
				cur = 1
			}
			cur *= 12
			last = nw
			flush()
			continue
		}
		last = nw
		if nw.ordinal {
			flush()
		}
	}
	flush()
	return out
}
