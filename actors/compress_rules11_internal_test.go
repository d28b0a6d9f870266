package actors

import (
	"strings"
	"testing"

	"github.com/troupe-run/troupe/messages"
	pctx "github.com/troupe-run/troupe/pipelines/context"
)

// Whether a compression call's answer longer than what it condenses is taken
// follows the rules of the task that made the call (recorded with its request),
// not those of whatever task the session runs when the answer is folded; and a
// section's condensation compares its answer with the section's text in the same
// estimate (four bytes a token), not with the context's cl100k count of it.
func TestAnswerLongerFollowsTheCallsRulesAndEstimates(t *testing.T) {
	s := NewSessionState("s") // no task runs: activeRules is this build's
	s.history = []messages.ChatMessage{{Role: messages.RoleTool, Content: strings.Repeat("word ", 40)}}
	long := strings.Repeat("a digest that grows ", 100)
	digest := &compressCall{purpose: pctx.PurposeDigest, index: 0, rules: 10}
	if why := s.answerLonger(digest, long); why != "" {
		t.Errorf("a call of a rules-10 task: its answer refused (%s), where rules 10 took it", why)
	}
	digest.rules = rulesShorterDigest
	if why := s.answerLonger(digest, long); why == "" {
		t.Errorf("a call of a rules-11 task: its longer answer taken")
	}
	// A section of 400 bytes (100 estimated tokens) the context counted as 80
	// cl100k tokens, condensed to 360 bytes (90 estimated): shorter, taken.
	section := &compressCall{purpose: pctx.PurposeCondenseSection, of: strings.Repeat("abcd", 100), tokens: 80, rules: rulesShorterDigest}
	if why := s.answerLonger(section, strings.Repeat("wxyz", 90)); why != "" {
		t.Errorf("a section's shorter condensation refused: %s", why)
	}
	if why := s.answerLonger(section, strings.Repeat("wxyz", 120)); why == "" {
		t.Errorf("a section's longer condensation taken")
	}
}
