package notes_test

import (
	"testing"

	"github.com/troupe-run/troupe/tools/notes"
)

// A note written in Chinese or Japanese is found by a query in its language: the
// search read each run of Han or kana as one word, so only a query equal to a whole
// phrase of the note between punctuation found it.
func TestSearchFindsNotesWrittenWithoutSpaces(t *testing.T) {
	n := newNotes(t, notes.Config{Log: openLog(t, t.TempDir(), false), Agent: "planner"})
	box := toolbox(t, n)
	for key, body := range map[string]string{
		"s-1/2": "卢浮宫每周二闭馆。",
		"s-1/3": "東京駅から京都駅まで新幹線で二時間です。",
		"s-1/4": "The Louvre closes on Tuesdays.",
	} {
		if _, err := do(t, box, key, "add", `{"type":"fact","body":"`+body+`"}`); err != nil {
			t.Fatal(err)
		}
	}
	for query, want := range map[string]string{
		"卢浮宫周二开门吗": "卢浮宫每周二闭馆。",
		"京都までの新幹線": "東京駅から京都駅まで新幹線で二時間です。",
	} {
		found, err := n.Search(testCtx(t), query, notes.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if len(found.Notes) == 0 || found.Notes[0].Body != want {
			t.Errorf("%q found %+v, want %q first", query, found.Notes, want)
		}
	}
}
