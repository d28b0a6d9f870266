package memory

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// negationWords are the words that negate what follows them, in English and a few
// languages whose negation is a word of its own (each form of it: German "kein",
// "keinen", "keinem", …); a word ending in "n't" negates too. "nor" is not among
// them, nor "ni", "nem": each goes on the negation of a "neither" or a "not"
// before it ("neither meat nor fish" negates as "not meat or fish").
var negationWords = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`not no never none nobody nothing neither nowhere cannot without
		nicht kein keine keinen keinem keiner keines nie niemals nichts niemand nirgends nirgendwo
		niet geen nooit niets nergens
		pas jamais aucun aucune rien
		não nunca nada nadie ningún ninguno ninguna ningunos ningunas jamás tampoco nenhum nenhuma ninguém non
		nessuno nessuna niente
		nigdy nikt
		не нет никогда ничего никто нигде`) {
		m[w] = true
	}
	return m
}()

// apostrophes writes the apostrophes a keyboard may type as "'": the right single
// quotation mark (’, what phones type) and the modifier letter apostrophe (ʼ).
var apostrophes = strings.NewReplacer("’", "'", "ʼ", "'")

// Negations returns how many negations text holds (negationWords, and words
// ending in "n't", in any apostrophe): "is not", "isn't" and "is no longer"
// negate alike, once. Two texts that hold other numbers of negations say other
// things however close an embedder puts them ("she is allergic to peanuts", "she
// is not …"), as the consolidator's dedupe and memory.DecideOffline read them; the
// counts are compared, not their parity: "he doesn't drink coffee and doesn't eat
// meat" denies two things, not none, and "no come nada" negates once in two words.
//
// Two uses of the words negate nothing: "no." before a number is the abbreviation
// of number ("No. 5 Baker Street"), and "not only", "not just" (or "n't only", …)
// before a "but" or an "also" adds ("not only a cook but also a painter").
func Negations(text string) int {
	lower := apostrophes.Replace(strings.ToLower(text))
	type word struct {
		w   string
		end int // the byte offset in lower after the word
	}
	var words []word
	start := -1
	for i, r := range lower + " " {
		if unicode.IsLetter(r) || r == '\'' {
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			if w := strings.TrimRight(lower[start:i], "'"); strings.Trim(w, "'") != "" {
				words = append(words, word{w: strings.TrimLeft(w, "'"), end: start + len(w)})
			}
			start = -1
		}
	}
	n := 0
	for i, w := range words {
		if !negationWords[w.w] && !strings.HasSuffix(w.w, "n't") {
			continue
		}
		if w.w == "no" && abbreviatesNumber(lower[w.end:]) {
			continue
		}
		if (w.w == "not" || strings.HasSuffix(w.w, "n't")) && i+1 < len(words) && onlyWords[words[i+1].w] &&
			slices.ContainsFunc(words[i+2:], func(w word) bool { return w.w == "but" || w.w == "also" }) {
			continue
		}
		n++
	}
	return n
}

// onlyWords after a "not" add rather than negate when a "but" or an "also"
// follows ("not only … but also").
var onlyWords = map[string]bool{"only": true, "just": true, "merely": true, "simply": true}

// abbreviatesNumber reports whether rest, the text after a "no", makes it the
// abbreviation of number: a period, then a digit (spaces between).
func abbreviatesNumber(rest string) bool {
	rest, ok := strings.CutPrefix(rest, ".")
	if !ok {
		return false
	}
	rest = strings.TrimLeft(rest, " \u00a0")
	r, _ := utf8.DecodeRuneInString(rest)
	return unicode.IsDigit(r)
}

// Numbers returns the numbers of text, sorted, without repeats,
// joined by spaces. A number is a run of decimal digits in any script's digits
// (ASCII, full-width, Arabic-Indic, Devanagari, …: Unicode's Nd), each read as its
// value in ASCII digits without leading zeros ("007" and "００７" are "7"), or such
// runs joined by one separator (numberSeparator), read in their order with "_"
// for any separator: "2026-05-03" is "2026_5_3", "3.5" and "3,5" are "3_5". Japanese
// input writes "５月３日" in full-width digits, which an ASCII-only reading did not
// see: the flight of May 3 merged into that of May 5; and the runs read apart in any
// order merged "2026-05-03" with "2026-03-05". A number written with no decimal
// digit (a fraction ½, a superscript ², a Roman numeral Ⅷ: Unicode's No and Nl) is
// the character itself. A number written in English words is its value
// (numberWordValues): "twenty-one" is "21".
//
// Two texts whose numbers differ say other things however close an embedder puts
// them ("the flight is on May 3" and "… May 5"): the consolidator's dedupe and
// the offline write decision (memory.DecideOffline) do not take one for a
// duplicate of the other.
func Numbers(text string) string {
	var nums []string
	var num, part []byte
	endPart := func() {
		n := strings.TrimLeft(string(part), "0")
		if n == "" {
			n = "0"
		}
		if num != nil {
			num = append(num, '_')
		}
		num = append(num, n...)
		part = nil
	}
	flush := func() {
		if part != nil {
			endPart()
		}
		if num != nil {
			nums = append(nums, string(num))
			num = nil
		}
	}
	for _, r := range text {
		if d, ok := digitValue(r); ok {
			part = append(part, '0'+d)
			continue
		}
		if part != nil && numberSeparator(r) {
			endPart() // the number goes on if a digit follows
			continue
		}
		flush()
		if r >= 0x80 && unicode.In(r, unicode.No, unicode.Nl) {
			nums = append(nums, string(r))
		}
	}
	flush()
	nums = append(nums, numberWordValues(text)...)
	slices.Sort(nums)
	return strings.Join(slices.Compact(nums), " ")
}

// numberSeparator reports whether r, between two runs of digits, joins them into
// one number: a decimal or thousands separator (. , ' and the Arabic ٫ ٬, the
// no-break and thin spaces), or the separator of a date, a time, a fraction or a
// range (- / :), in ASCII or full width.
func numberSeparator(r rune) bool {
	switch r {
	case '.', ',', '\'', ':', '/', '-', '\u00a0', '\u2009', '\u202f', '\u066b', '\u066c',
		'．', '，', '：', '／', '－':
		return true
	}
	return false
}

// digitValue returns the value of r if it is a decimal digit of any script
// (Unicode's Nd). Unicode encodes each script's digits as a run of ten from its
// zero, and each range of unicode.Nd of stride 1 is such runs back to back, so a
// digit's value is its distance from its range's start modulo 10.
func digitValue(r rune) (byte, bool) {
	if r >= '0' && r <= '9' {
		return byte(r - '0'), true
	}
	if r < 0x80 || !unicode.Is(unicode.Nd, r) {
		return 0, false
	}
	for _, rg := range unicode.Nd.R16 {
		if lo, hi := rune(rg.Lo), rune(rg.Hi); r >= lo && r <= hi && rg.Stride == 1 {
			return byte((r - lo) % 10), true
		}
	}
	for _, rg := range unicode.Nd.R32 {
		if lo, hi := rune(rg.Lo), rune(rg.Hi); r >= lo && r <= hi && rg.Stride == 1 {
			return byte((r - lo) % 10), true
		}
	}
	return 0, false
}
