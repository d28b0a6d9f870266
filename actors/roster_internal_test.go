package actors

import (
	"testing"

	"github.com/troupe-run/troupe/messages"
)

// The configuration a task records holds its agent's roster from rules 10 only
// (a rules 9 task's digest is a rules 9 build's), and a node's live digests are
// of both forms, so that a session of rules 9 recovered reads none of its agents'
// configurations from the log (SessionActor.loadConfigs).
func TestRosterRecordedFromRules10(t *testing.T) {
	roster := []messages.RosterAgent{{Name: "lead"}, {Name: "helper", Description: "computes"}}
	lead := Agent{Name: "lead", Tools: []messages.ToolSpec{{Name: DelegateTool}}, Roster: roster}
	critic := Agent{Name: "critic", Paradigm: Reflection{}}
	as := Agents{Default: Agent{}, Named: map[string]Agent{"lead": lead, "critic": critic}}.withDigests()
	live := liveConfigs(&as)
	for _, a := range []Agent{lead, critic} {
		old, now := a.configOf(rulesRoster-1), a.configOf(rulesRoster)
		if old.Roster != nil || old.CriticPrompt != "" {
			t.Errorf("%s under rules 9 records %+v", a.Name, old)
		}
		if a.Name == "lead" && len(now.Roster) != 2 || a.Name == "critic" && now.CriticPrompt != DefaultCriticPrompt {
			t.Errorf("%s under rules 10 records %+v", a.Name, now)
		}
		if !live[ConfigDigest(&old)] || !live[ConfigDigest(&now)] {
			t.Errorf("%s: the live digests lack a form: %v", a.Name, live)
		}
	}
}
