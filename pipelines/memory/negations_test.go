package memory

import "testing"

// Each form of a negation word negates, in any apostrophe: German "keinen" and
// "nichts", Dutch "niet", Italian "niente", Spanish "ninguno", Polish "nigdy",
// Russian "не" read as none, so that "Alice hat keinen Hund" and "Alice hat einen
// Hund" were one fact to the dedupe and to the offline write decision, and so
// were "isnʼt" (U+02BC) and "is". A word that only holds one ("know", "note",
// "Nokia", "piano") does not negate.
func TestNegationsReadEachFormOfANegation(t *testing.T) {
	for _, c := range []struct {
		text string
		want int
	}{
		{"Alice hat keinen Hund", 1},
		{"Alice hat keinem Kollegen davon erzählt", 1},
		{"Alice weiß nichts davon", 1},
		{"Alice drinkt geen koffie", 1},
		{"Alice drinkt niet", 1},
		{"Alice non mangia niente", 2},
		{"Alice no tiene ninguno", 2},
		{"Alice nigdy nie pije kawy", 2},
		{"Алиса не пьёт кофе", 1},
		{"Alice isnʼt allergic to nuts", 1},
		{"Alice isn’t allergic to nuts", 1},
		{"Alice knows the piano teacher at Nokia and takes a note", 0},
		{"Alice eats neither meat nor fish", 1},
	} {
		if got := Negations(c.text); got != c.want {
			t.Errorf("Negations(%q) = %d, want %d", c.text, got, c.want)
		}
	}
}

// "No." before a number abbreviates number, and "not only … but also" adds: read
// as negations, "Alice lives at No. 5 Baker Street" and "… at number 5 Baker
// Street", or "Alice is not only a cook but also a painter" and "Alice is a cook
// and also a painter", were kept apart for ever, one fact twice.
func TestNegationsSkipNumberAndNotOnly(t *testing.T) {
	for _, c := range []struct {
		text string
		want int
	}{
		{"Alice lives at No. 5 Baker Street", 0},
		{"Alice lives at no.5 Baker Street", 0},
		{"Alice is not only a cook but also a painter", 0},
		{"Alice doesn't just cook, she also paints", 0},
		{"Alice does not only work on Mondays", 1},
		{"No, Alice has no car", 2},
		{"Alice has no 5-year-old", 1},
		{"'no' is what Alice said", 1},
	} {
		if got := Negations(c.text); got != c.want {
			t.Errorf("Negations(%q) = %d, want %d", c.text, got, c.want)
		}
	}
}
