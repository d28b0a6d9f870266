package disclosure_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/actors"
	"github.com/troupe-run/troupe/tools"
	"github.com/troupe-run/troupe/tools/disclosure"
)

// Tools described in Chinese or Japanese (as many MCP servers' are) are found by a
// query in those languages, which are written without spaces between words: each
// run of Han, kana or Hangul was one word, so a query matched a tool only when it
// was a whole phrase of its description between punctuation, and search_tools
// answered "no tool matches" to a query as plain as 天气预报 for a tool that
// "查询城市的天气预报".
func TestSearchFindsToolsDescribedWithoutSpaces(t *testing.T) {
	d := mustNew(t, disclosure.Search, []tools.Tool{
		tool("weather_forecast", "mcp:weather", "查询城市的天气预报"),
		tool("weather_alerts", "mcp:weather", "列出地区的暴雨和高温预警"),
		tool("train_search", "mcp:rail", "東京都内の電車の時刻表を検索します"),
		tool("news_ko", "mcp:news", "오늘의뉴스를검색합니다"),
		tool("git_log", "mcp:git", "Show the commit history of a repository"),
	})
	for query, want := range map[string]string{
		"天气预报":           "weather_forecast",
		"北京明天的天气预报怎么样":   "weather_forecast",
		"有没有高温预警":        "weather_alerts",
		"電車の時刻表":         "train_search",
		"뉴스 검색":          "news_ko",
		"commit history": "git_log",
	} {
		res, err := callNamed(t, d, actors.ToolSearchTools, `{"query":`+fmt.Sprintf("%q", query)+`,"limit":1}`)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Loaded []string }
		if err := json.Unmarshal([]byte(res), &r); err != nil || len(r.Loaded) != 1 || r.Loaded[0] != want {
			t.Errorf("%q: %s, want %s", query, res, want)
		}
	}
}

func TestTokenizeSplitsCJKIntoBigrams(t *testing.T) {
	for text, want := range map[string]string{
		"天气预报":                "天气 气预 预报",
		"查询天气API的getForecast": "查询 询天 天气 api 的 get forecast",
		"雨":                   "雨",
		"東京 の 天気":             "東京 の 天気",
	} {
		if got := strings.Join(disclosure.Tokenize(text), " "); got != want {
			t.Errorf("Tokenize(%q) = %q, want %q", text, got, want)
		}
	}
}

// Letters and digits typed in an input method's fullwidth mode ("ＷＥＡＴＨＥＲ",
// "ｍｐ３") are the ASCII ones: a query in them meets a description in ASCII.
func TestFullwidthFormsMeetASCII(t *testing.T) {
	if got, want := strings.Join(disclosure.Tokenize("ＷＥＡＴＨＥＲ ｆｏｒｅｃａｓｔ，ｍｐ３"), " "), "weather forecast mp3"; got != want {
		t.Errorf("Tokenize = %q, want %q", got, want)
	}
}

// A tool described in halfwidth katakana is found by a query in fullwidth
// katakana, and the other way round.
func TestHalfwidthKatakanaMeetsFullwidth(t *testing.T) {
	d := mustNew(t, disclosure.Search, []tools.Tool{
		tool("coffee", "mcp:cafe", "ｺｰﾋｰの注文を送ります"),
		tool("guide", "mcp:travel", "ガイドブックを検索します"),
		tool("git_log", "mcp:git", "Show the commit history of a repository"),
	})
	for query, want := range map[string]string{"コーヒー": "coffee", "ｶﾞｲﾄﾞﾌﾞｯｸ": "guide"} {
		res, err := callNamed(t, d, actors.ToolSearchTools, `{"query":`+fmt.Sprintf("%q", query)+`,"limit":1}`)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ Loaded []string }
		if err := json.Unmarshal([]byte(res), &r); err != nil || len(r.Loaded) != 1 || r.Loaded[0] != want {
			t.Errorf("%q: %s, want %s", query, res, want)
		}
	}
}
