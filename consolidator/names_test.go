package consolidator_test

import (
	"testing"
)

// Two texts that name other people, places or things are two facts: with the
// offline hashing embedder (the node's default) "Alice told us … that her manager
// is Carol from the billing team" and "… is Dave …" have a cosine of 0.94, over a
// floor of about 0 in a tier of unrelated facts, and the newer was merged into the
// older, found by no search. A pair of which each names someone the other does not
// is not merged and goes to the conflict judgement; a name the other text has in
// lower case, or one text naming more than the other, merges as before.
func TestPlanDoesNotMergeFactsThatNameOthers(t *testing.T) {
	pairs := []textPair{
		{"Alice told us during the onboarding call that her manager is Carol from the billing team",
			"Alice told us during the onboarding call that her manager is Dave from the billing team", false},
		{"Carol told us during the onboarding call that the invoices of the billing team go out every week",
			"Dave told us during the onboarding call that the invoices of the billing team go out every week", false},
		{"Alice told us during the onboarding call that she flies to Lisbon for the conference in spring",
			"Alice told us during the onboarding call that she flies to Porto for the conference in spring", false},
		{"Alice told us during the onboarding call that her manager is Carol from the billing team",
			"Alice told us during the onboarding call that her manager is Carol from the Billing team", true},
		{"Alice told us during the onboarding call that her manager is Carol from the billing team",
			"Alice told us during the onboarding call that her manager is Carol from the billing team in Lisbon", true},
	}
	checkAmongOthers(t, pairs)
}
