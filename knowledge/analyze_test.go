package knowledge

import (
	"math"
	"slices"
	"testing"
)

// The BM25 tokenizer keeps identifiers whole beside their parts, and stems English
// words with Porter2.
func TestTerms(t *testing.T) {
	var cache stemCache
	for text, want := range map[string][]string{
		"Error PAY-4013 means":          {"error", "pay", "4013", "mean", "pay-4013"},
		"set max_connections=100.":      {"set", "max", "connect", "100", "max_connections"},
		"Harbor v2.3.5, not v2.3.4.":    {"harbor", "v2", "3", "5", "v2", "3", "4", "v2.3.5", "v2.3.4"},
		"the running dogs":              {"run", "dog"},
		"a--b and -x- and end.":         {"b", "x", "end"},
		"mail ops@example.com now":      {"mail", "op", "exampl", "com", "ops@example.com"},
		"Überstunden ausbezahlt":        {"überstunden", "ausbezahlt"},
		"東京都":                           {"東京", "京都"},
		"path /etc/sysctl.d/ here":      {"path", "etc", "sysctl", "etc/sysctl.d"},
		"hmac-sha256 HMAC-SHA256":       {"hmac", "sha256", "hmac", "sha256", "hmac-sha256", "hmac-sha256"},
		"no identifier here, only text": {"identifi", "text"},
	} {
		got := terms(text)
		if !slices.Equal(got, want) {
			t.Errorf("terms(%q) = %q, want %q", text, got, want)
		}
		// A base's cached stems give the same terms, the first time and after.
		for range 2 {
			if got := cache.terms(text); !slices.Equal(got, want) {
				t.Errorf("stemCache.terms(%q) = %q, want %q", text, got, want)
			}
		}
	}
}

func TestNormalise(t *testing.T) {
	nan := math.NaN()
	s := candidateScores{0.8, 0.9, nan, 0.7}
	s.normalise(normMinMax)
	if math.Abs(s[0]-0.5) > 1e-12 || s[1] != 1 || s[2] != 0 || s[3] != 0 { // NaN: the lowest
		t.Errorf("min-max %v", s)
	}
	flat := candidateScores{3, 3, nan}
	flat.normalise(normZ)
	if !slices.Equal(flat, candidateScores{0, 0, 0}) {
		t.Errorf("flat list by z-score %v, want all 0", flat)
	}
	flat = candidateScores{3, 3, nan}
	flat.normalise(normMinMax)
	if !slices.Equal(flat, candidateScores{1, 1, 0}) {
		t.Errorf("flat list by min-max %v, want 1 1 0", flat)
	}
	z := candidateScores{1, 3, nan}
	z.normalise(normZ)
	if z[0] != -1 || z[1] != 1 || z[2] != -1 {
		t.Errorf("z-score %v, want -1 1 -1", z)
	}
	// Without BM25 lists the vector lists get all the weight, and the reverse; a
	// vector search's scores are its cosines, not normalised.
	got := fuseConvex([]string{"a", "b"}, []candidateScores{{0.2, 0.9}}, nil, 0.5, normCoverage)
	if got[0].id != "b" || got[0].score != 0.9 || got[1].score != 0.2 {
		t.Errorf("vector only: %v", got)
	}
	got = fuseConvex([]string{"a", "b"}, nil, []candidateScores{{0.7, 0.2}}, 0.5, normCoverage)
	if got[0].id != "a" || got[0].score != 0.7 || got[1].score != 0.2 {
		t.Errorf("bm25 only (coverage comes normalised): %v", got)
	}
	got = fuseConvex([]string{"a", "b", "c"}, []candidateScores{{0.9, 0.8, 0.7}}, []candidateScores{{0, 0.5, 1}}, 0.6, normCoverage)
	// a: 0.6×1 + 0.4×0, b: 0.6×0.5 + 0.4×0.5, c: 0.6×0 + 0.4×1
	for i, want := range []fusedID{{"a", 0.6}, {"b", 0.5}, {"c", 0.4}} {
		if got[i].id != want.id || math.Abs(got[i].score-want.score) > 1e-12 {
			t.Errorf("mixed: %v, want %v", got, want)
		}
	}
}

// Full-width text, as an input method types it in its full-width mode, gives the
// terms of its ASCII: "ＰＡＹ－４０１３" finds PAY-4013, its parts and its whole.
func TestTermsOfFullWidthText(t *testing.T) {
	want := terms("Error PAY-4013 means")
	if got := terms("Ｅｒｒｏｒ\u3000ＰＡＹ－４０１３\u3000ｍｅａｎｓ"); !slices.Equal(got, want) {
		t.Errorf("terms of the full-width text = %q, want %q", got, want)
	}
}

// An identifier written in halfwidth katakana is the one written fullwidth, whole
// as in its parts (which pipelines/memory's Tokenize folds, cjk.Fold): a query for
// ガイド-7 finds the document that wrote ｶﾞｲﾄﾞ-7, as old systems and receipts
// write it, by the whole identifier too, and ranks it over documents that hold
// its parts apart.
func TestTermsFoldHalfwidthKatakanaIdentifiers(t *testing.T) {
	want := terms("ガイド-7 を見る")
	if got := terms("ｶﾞｲﾄﾞ-7 を見る"); !slices.Equal(got, want) {
		t.Errorf("terms of the halfwidth spelling = %q, want the fullwidth one's %q", got, want)
	}
}
