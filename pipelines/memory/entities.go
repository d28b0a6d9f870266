package memory

import (
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/troupe-run/troupe/internal/cjk"
	"golang.org/x/text/unicode/norm"
)

// Relation types ExtractEntities produces.
const (
	RelIsA     = "is_a"
	RelWorksAt = "works_at"
	RelLivesIn = "lives_in"
	RelLikes   = "likes"
	RelPrefers = "prefers"
	RelHas     = "has"
)

// UserEntity names the speaker: ExtractEntities turns a first-person subject ("I live
// in Paris") into a relation from "user".
const UserEntity = "user"

var (
	emailPattern    = regexp.MustCompile(`[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}`)
	handlePattern   = regexp.MustCompile(`@[A-Za-z0-9_]{1,39}`)
	quotedPattern   = regexp.MustCompile(`"([^"\n]{1,80})"|“([^”\n]{1,80})”`)
	quantityPattern = regexp.MustCompile(`[$€£¥]\d+(?:[.,]\d+)*|\d+(?:[.,]\d+)?(?:\s?(%|°[CcFf]|[A-Za-z]+))`)
)

// units a number may carry to be an entity. The one-letter ones, and "in", count only
// when written against the number ("5m", "30s"), not "5 in the morning".
var units = setOf(`kg mg lb lbs km cm mm mi mile miles ft feet inch inches kb mb gb tb ms
	sec secs second seconds min mins minute minutes hr hrs hour hours day days week weeks
	month months year years usd eur gbp jpy k bn million billion percent kph mph l ml`)

var tightUnits = setOf(`s m h g`)

// starters are words that begin a sentence capitalised without naming anything.
var starters = setOf(`yesterday today tomorrow tonight please also however then
	maybe perhaps hi hello hey thanks thank yes ok okay well now remember note
	actually still sure oh anyway besides meanwhile later first next finally lets let
	call email send ping tell ask check remind buy book schedule find`)

// connectors may join capitalised words into one name ("Bank of America").
var connectors = setOf(`of de del da di van von der den la le du al bin`)

func setOf(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}

// ExtractEntities is the offline entity and relation extractor, used when no model is
// configured. It is an honest heuristic for English text, not a parser: it misses
// entities and relations a model would find, and it may take a capitalised common
// word for a name. It finds
//
//   - emails and @handles;
//   - quoted terms of one to four words ("…" or “…”);
//   - numbers with a unit or currency ("5 kg", "30%", "$120"), written without the
//     space ("5kg");
//   - runs of capitalised words, joined by of/de/van/… ("Bank of America"), with
//     stopwords trimmed from their ends. A run at the start of a sentence keeps its
//     first word only if that word is not a stopword or a common sentence opener
//     ("Today", "Please", an imperative such as "Call"), or if it also appears
//     capitalised inside a sentence;
//   - relations, when a capitalised name, an email or handle, or "I" (as UserEntity)
//     stands right before one of these verbs and an object follows in the same
//     clause: "X is/was/am a|an|the Y" (is_a), "X works at|for Y" (works_at),
//     "X lives in Y" (lives_in), "X likes/loves/enjoys Y" (likes), "X prefers Y"
//     (prefers), "X has Y" (has). The object is the name that follows, or up to three
//     non-stopword words after an article or possessive. Negated or lowercase subjects
//     give no relation.
//
// Names are normalised with NormalizeEntity. Entities (relation ends included) come
// in order of first appearance, relations in order of appearance, both without
// repeats, so the same text always gives the same output. Only the first
// MaxTokenizeBytes bytes are read.
func ExtractEntities(text string) (entities []string, relations []Relation) {
	if len(text) > MaxTokenizeBytes {
		text = text[:MaxTokenizeBytes]
	}
	text = norm.NFC.String(cjk.Narrow(text)) // as Tokenize: one spelling of each accented letter, one width
	var found []foundEntity
	add := func(pos int, name string) {
		if name = NormalizeEntity(name); name != "" {
			found = append(found, foundEntity{pos, name})
		}
	}

	// Emails and handles become single tokens; quoted terms and quantities are
	// entities but their words still take part in names and relations.
	var specials [][2]int
	for _, m := range emailPattern.FindAllStringIndex(text, -1) {
		specials = append(specials, [2]int{m[0], m[1]})
	}
	emails := len(specials) // in text order, not overlapping one another
	e := 0
	for _, m := range handlePattern.FindAllStringIndex(text, -1) {
		if m[0] > 0 {
			prev, _ := utf8.DecodeLastRuneInString(text[:m[0]])
			if isWordRune(prev) || prev == '.' || prev == '@' {
				continue // part of an email or a word
			}
		}
		for e < emails && specials[e][1] <= m[0] {
			e++
		}
		if e < emails && specials[e][0] < m[1] {
			continue // inside an email
		}
		specials = append(specials, [2]int{m[0], m[1]})
	}
	slices.SortFunc(specials, func(a, b [2]int) int { return a[0] - b[0] })
	for _, s := range specials {
		add(s[0], text[s[0]:s[1]])
	}
	for _, m := range quotedPattern.FindAllStringSubmatchIndex(text, -1) {
		lo, hi := m[2], m[3]
		if lo < 0 {
			lo, hi = m[4], m[5]
		}
		if n := len(strings.Fields(text[lo:hi])); n >= 1 && n <= 4 {
			add(lo, text[lo:hi])
		}
	}
	var quantities [][2]int
	for _, m := range quantityPattern.FindAllStringSubmatchIndex(text, -1) {
		if q, ok := quantity(text, m); ok {
			add(m[0], q)
			quantities = append(quantities, [2]int{m[0], m[1]})
		}
	}

	words := scanWords(text, specials)
	for i, q := 0, 0; i < len(words); i++ { // both in text order
		for q < len(quantities) && quantities[q][1] <= words[i].start {
			q++
		}
		if q < len(quantities) && quantities[q][0] < words[i].start+len(words[i].text) {
			words[i].capital = false // the unit of a quantity ("3 GB") names nothing
		}
	}
	spans := names(words)
	for _, s := range spans {
		add(words[s.first].start, s.name)
	}
	rels := findRelations(words, spans)
	for _, r := range rels {
		found = append(found, foundEntity{words[r.at].start, r.From}, foundEntity{words[r.at].start, r.To})
	}

	slices.SortStableFunc(found, func(a, b foundEntity) int { return a.pos - b.pos })
	seen := map[string]bool{}
	for _, f := range found {
		if !seen[f.name] {
			seen[f.name] = true
			entities = append(entities, f.name)
		}
	}
	stated := map[Relation]bool{}
	for _, r := range rels {
		if !stated[r.Relation] {
			stated[r.Relation] = true
			relations = append(relations, r.Relation)
		}
	}
	return entities, relations
}

type foundEntity struct {
	pos  int
	name string
}

// quantity checks a quantityPattern match: the number must start a word and the unit
// be a known one. It returns the quantity without the space before its unit.
func quantity(text string, m []int) (string, bool) {
	if m[0] > 0 {
		prev, _ := utf8.DecodeLastRuneInString(text[:m[0]])
		if isWordRune(prev) || prev == '.' || prev == ',' {
			return "", false
		}
	}
	s := text[m[0]:m[1]]
	if m[2] < 0 {
		return s, true // a currency amount: the pattern's first branch
	}
	if m[1] < len(text) {
		next, _ := utf8.DecodeRuneInString(text[m[1]:])
		if isWordRune(next) {
			return "", false
		}
	}
	unit := strings.ToLower(text[m[2]:m[3]])
	spaced := m[2] > 0 && unicode.IsSpace(rune(text[m[2]-1]))
	switch {
	case unit == "%" || strings.HasPrefix(unit, "°") || units[unit]:
	case tightUnits[unit] && !spaced:
	default:
		return "", false
	}
	return strings.Join(strings.Fields(s), ""), true
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// word is a word of the text as ExtractEntities sees it.
type word struct {
	text        string
	start       int
	lower       string
	capital     bool // starts with an upper-case letter
	special     bool // an email or a handle
	sentenceBeg bool // first word of a sentence
	clauseBeg   bool // punctuation stands between this word and the one before
}

// scanWords splits text into words (letters and digits, with inner apostrophes and
// hyphens), and the special spans into one word each.
func scanWords(text string, specials [][2]int) []word {
	var words []word
	sentence, clause := true, true
	emit := func(lo, hi int, special bool) {
		w := word{text: text[lo:hi], start: lo, special: special, sentenceBeg: sentence, clauseBeg: clause || sentence}
		w.lower = strings.ToLower(w.text)
		r, _ := utf8.DecodeRuneInString(w.text)
		w.capital = unicode.IsUpper(r) || unicode.IsTitle(r)
		words = append(words, w)
		sentence, clause = false, false
	}
	sp := 0
	for i := 0; i < len(text); {
		if sp < len(specials) && i == specials[sp][0] {
			emit(specials[sp][0], specials[sp][1], true)
			i = specials[sp][1]
			sp++
			continue
		}
		for sp < len(specials) && specials[sp][0] < i {
			sp++
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		if isWordRune(r) {
			j := i + size
			for j < len(text) && (sp >= len(specials) || j < specials[sp][0]) {
				r2, s2 := utf8.DecodeRuneInString(text[j:])
				if isWordRune(r2) {
					j += s2
					continue
				}
				if r2 == '\'' || r2 == '’' || r2 == '-' {
					if r3, _ := utf8.DecodeRuneInString(text[j+s2:]); isWordRune(r3) {
						j += s2
						continue
					}
				}
				break
			}
			emit(i, j, false)
			i = j
			continue
		}
		switch {
		case r == '\n':
			sentence = true
		case r == '.' || r == '!' || r == '?':
			next, _ := utf8.DecodeRuneInString(text[i+size:])
			if i+size >= len(text) || unicode.IsSpace(next) || next == '"' || next == '”' || next == ')' {
				sentence = true
			} else {
				clause = true
			}
		case !unicode.IsSpace(r):
			clause = true
		}
		i += size
	}
	return words
}

// nameSpan is a run of words [first, last] that names an entity.
type nameSpan struct {
	first, last int
	name        string
}

// names finds the runs of capitalised words, and the special words, that name
// entities.
func names(words []word) []nameSpan {
	// Words seen capitalised inside a sentence: a sentence opener that is one of them
	// is a name after all.
	inner := map[string]bool{}
	for _, w := range words {
		if w.capital && !w.sentenceBeg {
			inner[w.lower] = true
		}
	}
	var spans []nameSpan
	for i := 0; i < len(words); {
		w := words[i]
		if w.special {
			spans = append(spans, nameSpan{i, i, w.text})
			i++
			continue
		}
		if !w.capital {
			i++
			continue
		}
		j := i // the run is words[i..j]
		for {
			if j+1 < len(words) && words[j+1].capital && !words[j+1].special && !words[j+1].clauseBeg {
				j++
				continue
			}
			if j+2 < len(words) && connectors[words[j+1].lower] && !words[j+1].clauseBeg &&
				words[j+2].capital && !words[j+2].special && !words[j+2].clauseBeg {
				j += 2
				continue
			}
			break
		}
		lo, hi := i, j
		if words[lo].sentenceBeg && (stopwords[words[lo].lower] || starters[words[lo].lower]) && !inner[words[lo].lower] {
			lo++
		}
		for lo <= hi && (stopwords[words[lo].lower] || connectors[words[lo].lower]) {
			lo++
		}
		for hi >= lo && (stopwords[words[hi].lower] || connectors[words[hi].lower]) {
			hi--
		}
		if lo <= hi {
			spans = append(spans, nameSpan{lo, hi, joinWords(words[lo : hi+1])})
		}
		i = j + 1
	}
	return spans
}

func joinWords(ws []word) string {
	parts := make([]string, len(ws))
	for i, w := range ws {
		parts[i] = w.text
	}
	return strings.Join(parts, " ")
}

// foundRelation is a relation and the index of its verb.
type foundRelation struct {
	Relation
	at int
}

// verbs maps a verb form to its relation type and the words that must follow it
// before the object (nil: none).
var verbs = func() map[string]verbForm {
	m := map[string]verbForm{}
	set := func(forms, typ string, after ...string) {
		for _, f := range strings.Fields(forms) {
			m[f] = verbForm{typ, after}
		}
	}
	set("is was am", RelIsA, "a", "an", "the")
	set("works work worked", RelWorksAt, "at", "for")
	set("lives live lived", RelLivesIn, "in")
	set("likes like liked loves love loved enjoys enjoy enjoyed", RelLikes)
	set("prefers prefer preferred", RelPrefers)
	set("has have had", RelHas)
	return m
}()

type verbForm struct {
	typ   string
	after []string
}

// leaders are skipped at the start of an object.
var leaders = setOf(`a an the my his her their our your its some`)

func findRelations(words []word, spans []nameSpan) []foundRelation {
	endsAt := map[int]nameSpan{}
	startsAt := map[int]nameSpan{}
	for _, s := range spans {
		endsAt[s.last] = s
		startsAt[s.first] = s
	}
	var out []foundRelation
	for i := 1; i < len(words); i++ {
		v, ok := verbs[words[i].lower]
		if !ok || words[i].clauseBeg {
			continue
		}
		var subject string
		if s, ok := endsAt[i-1]; ok {
			subject = s.name
		} else if words[i-1].text == "I" {
			subject = UserEntity
		} else {
			continue
		}
		o := i + 1
		if v.after != nil {
			if o >= len(words) || words[o].clauseBeg || !slices.Contains(v.after, words[o].lower) {
				continue
			}
			o++
		}
		for o < len(words) && !words[o].clauseBeg && leaders[words[o].lower] {
			o++
		}
		if o >= len(words) || words[o].clauseBeg {
			continue
		}
		var object string
		if s, ok := startsAt[o]; ok {
			object = s.name
		} else {
			end := o
			for end < len(words) && end < o+3 && (end == o || !words[end].clauseBeg) &&
				!words[end].capital && !stopwords[words[end].lower] && verbs[words[end].lower].typ == "" {
				end++
			}
			if end == o {
				continue
			}
			object = joinWords(words[o:end])
		}
		r := Relation{From: NormalizeEntity(subject), Type: v.typ, To: NormalizeEntity(object)}
		if r.From != r.To {
			out = append(out, foundRelation{r, i})
		}
	}
	return out
}
