package memory

import (
	"slices"
	"strings"
	"testing"
)

func TestExtractEntities(t *testing.T) {
	for _, c := range []struct {
		name      string
		text      string
		entities  []string
		relations []Relation
	}{
		{
			"works at, sentence opener that is a stopword",
			"Alice works at Acme Corp. She lives in Berlin with Bob.",
			[]string{"alice", "acme corp", "berlin", "bob"},
			// "She" is no name, so the second sentence gives no relation.
			[]Relation{{"alice", RelWorksAt, "acme corp"}},
		},
		{
			"first person, email, handle",
			"I live in Paris and I like green tea. My email is bob.smith@example.com, ping @bobby.",
			[]string{"user", "paris", "green tea", "bob.smith@example.com", "@bobby"},
			[]Relation{{"user", RelLivesIn, "paris"}, {"user", RelLikes, "green tea"}},
		},
		{
			"connectors, quantities, opener",
			"The Bank of America charged $120 and 5 kg of rice cost 30%. Today Alice is a software engineer at Acme.",
			[]string{"bank of america", "$120", "5kg", "30%", "alice", "software engineer", "acme"},
			[]Relation{{"alice", RelIsA, "software engineer"}},
		},
		{
			"quoted term, names mid-sentence, has",
			`Yesterday we met "Project Phoenix" lead Carol Danvers in New York. Alice has two cats.`,
			[]string{"project phoenix", "carol danvers", "new york", "alice", "two cats"},
			[]Relation{{"alice", RelHas, "two cats"}},
		},
		{
			"negation and clause breaks",
			"Alice doesn't like tea. Bob prefers coffee, tea. I am a doctor.",
			[]string{"alice", "bob", "coffee", "user", "doctor"},
			[]Relation{{"bob", RelPrefers, "coffee"}, {"user", RelIsA, "doctor"}},
		},
		{
			"units: tight one-letter units only, capitalised units name nothing",
			"We ran 5km in 30 min at 5 in the morning; 3.5 GB used, 10m away, 4 s later.",
			[]string{"5km", "30min", "3.5gb", "10m"},
			nil,
		},
		{
			"opener that recurs capitalised mid-sentence is a name",
			"Paris is big. I love Paris.",
			[]string{"paris", "user"},
			[]Relation{{"user", RelLikes, "paris"}},
		},
		{
			"opener that is not a stopword is a name",
			"Marie prefers the window seat.",
			[]string{"marie", "window seat"},
			[]Relation{{"marie", RelPrefers, "window seat"}},
		},
		{
			"lowercase subject gives no relation",
			"my cat likes fish",
			nil,
			nil,
		},
		{
			"repeats once, in order of first appearance",
			"Bob met Alice. Alice met Bob. Bob works for Acme. Bob works for Acme.",
			[]string{"bob", "alice", "acme"},
			[]Relation{{"bob", RelWorksAt, "acme"}},
		},
		{"empty", "", nil, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			entities, relations := ExtractEntities(c.text)
			if !slices.Equal(entities, c.entities) {
				t.Errorf("entities = %q, want %q", entities, c.entities)
			}
			if !slices.Equal(relations, c.relations) {
				t.Errorf("relations = %v, want %v", relations, c.relations)
			}
		})
	}
}

func TestExtractEntitiesDeterministicAndBounded(t *testing.T) {
	text := "Alice works at Acme. Bob lives in Rome. Carol likes \"Deep Work\". Email dan@x.io or @dan. 12kg, $5."
	e1, r1 := ExtractEntities(text)
	for range 20 {
		e2, r2 := ExtractEntities(text)
		if !slices.Equal(e1, e2) || !slices.Equal(r1, r2) {
			t.Fatalf("run differs: %q %v vs %q %v", e1, r1, e2, r2)
		}
	}
	// A huge input is cut at MaxTokenizeBytes; the repeats collapse to one each (and
	// the cut may leave one fragment of a word).
	e, r := ExtractEntities(strings.Repeat(text+" ", 40_000)) // about 4 MB
	if !slices.Equal(e[:len(e1)], e1) || len(e) > len(e1)+1 || !slices.Equal(r, r1) {
		t.Errorf("huge input: %q %v, want %q %v", e, r, e1, r1)
	}
}

// What ExtractEntities finds, Graph takes as is.
func TestExtractEntitiesIntoGraph(t *testing.T) {
	g := NewGraph()
	for id, text := range map[string]string{
		"m1": "Alice works at Acme.",
		"m2": "Acme is a robotics company based in Berlin.",
		"m3": "I live in Berlin.",
	} {
		e, r := ExtractEntities(text)
		g.Put(id, e, r)
	}
	q, _ := ExtractEntities("Where does Alice work?")
	// m1 mentions alice (1); m2 mentions acme, one hop from alice (0.5); m3 mentions
	// berlin and user, and berlin is not linked to acme (m2 states no relation to
	// berlin: "based in" is not a pattern), so 0.
	want := []Scored{{"m1", 1, 1}, {"m2", 0.5, 0.5}}
	if got := g.Candidates(q, 2, 10); !slices.Equal(got, want) {
		t.Errorf("Candidates = %v, want %v", got, want)
	}
}
