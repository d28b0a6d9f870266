package skills_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/troupe-run/troupe/tools/skills"
)

// Among more skills than an unknown name's error lists whole, load_skill asked for
// words of a description written in Chinese names the skill: the name asked for
// was cut into words at spaces and punctuation only, so a phrase of Han characters
// was one word, found only when the description held it whole.
func TestUnknownSkillNamesSkillsDescribedInChinese(t *testing.T) {
	dir := t.TempDir()
	for i := range 60 {
		name := fmt.Sprintf("skill-%02d", i)
		desc := fmt.Sprintf("Handles topic%02d tasks.", i)
		if i == 42 {
			desc = "查看城市的天气预报和降雨概率"
		}
		write(t, dir, name+"/SKILL.md", "---\nname: "+name+"\ndescription: "+desc+"\n---\nBody.\n", 0o644)
	}
	set, problems := load(t, skills.Config{Dir: dir})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	_, err := call(t, toolNamed(t, set, skills.ToolLoadSkill), `{"name": "查询天气预报"}`)
	if err == nil || !strings.Contains(err.Error(), "skill-42") {
		t.Fatalf("load_skill of a Chinese phrase of skill-42's description: %v", err)
	}
	if strings.Contains(err.Error(), "skill-41") {
		t.Errorf("the error names skills without a word of the phrase: %v", err)
	}
	_, err = call(t, toolNamed(t, set, skills.ToolLoadSkill), `{"name": "topic41城市"}`)
	if err == nil || !strings.Contains(err.Error(), "skill-42") || !strings.Contains(err.Error(), "skill-41") || strings.Contains(err.Error(), "skill-40") {
		t.Fatalf("load_skill of a word and a Chinese one: %v", err)
	}
}

// A name typed in an input method's fullwidth mode ("ｔｏｐｉｃ４１") asks for the
// ASCII words: load_skill's error names the skill whose description has them.
func TestUnknownSkillNamesSkillsForFullwidthWords(t *testing.T) {
	dir := t.TempDir()
	for i := range 60 {
		name := fmt.Sprintf("skill-%02d", i)
		write(t, dir, name+"/SKILL.md", fmt.Sprintf("---\nname: %s\ndescription: Handles topic%02d tasks.\n---\nBody.\n", name, i), 0o644)
	}
	set, problems := load(t, skills.Config{Dir: dir})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	_, err := call(t, toolNamed(t, set, skills.ToolLoadSkill), `{"name": "ＴＯＰＩＣ４１"}`)
	if err == nil || !strings.Contains(err.Error(), "skill-41") || strings.Contains(err.Error(), "skill-40") {
		t.Fatalf("load_skill of a fullwidth word of skill-41's description: %v", err)
	}
}

// A name typed in halfwidth katakana (ｺｰﾋｰ) asks for the fullwidth words (コーヒー),
// and a description written in halfwidth katakana is found by them: load_skill's
// error names the skill.
func TestUnknownSkillNamesSkillsForHalfwidthKatakana(t *testing.T) {
	dir := t.TempDir()
	for i := range 60 {
		name := fmt.Sprintf("skill-%02d", i)
		desc := fmt.Sprintf("Handles topic%02d tasks.", i)
		switch i {
		case 41:
			desc = "コーヒーの淹れ方を教えます"
		case 42:
			desc = "ｶﾞｲﾄﾞﾌﾞｯｸを探します"
		}
		write(t, dir, name+"/SKILL.md", "---\nname: "+name+"\ndescription: "+desc+"\n---\nBody.\n", 0o644)
	}
	set, problems := load(t, skills.Config{Dir: dir})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	for name, want := range map[string]string{"ｺｰﾋｰ": "skill-41", "ガイドブック": "skill-42"} {
		_, err := call(t, toolNamed(t, set, skills.ToolLoadSkill), `{"name": "`+name+`"}`)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("load_skill of %q: %v, want the error to name %s", name, err, want)
		}
	}
}
