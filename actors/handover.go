package actors

import (
	"encoding/json"
	"fmt"
	"sort"
	"unicode/utf8"

	"github.com/troupe-run/troupe/tools"
)

// MaxHandOverArguments bounds, in bytes, the arguments of a team's hand-over (the
// delegate call that hands a member its task) from decision rules 11: the
// delegate tool's bound on its arguments (a node's takes the tools' default), and
// so on its child's task, within the 1 MiB a task's input may be.
const MaxHandOverArguments = tools.DefaultMaxArguments

// handOverSlack is the room handOverArgs leaves for the notes of what it cuts.
const handOverSlack = 1 << 10

// handOverArgs returns the arguments of the delegate call that hands member w its
// task (taskText). From decision rules 11 (rulesHandOverWithin) they are at most
// MaxHandOverArguments long: past that, the team's task and its state share what
// the brief leaves (each whole if it takes half or less, the other the rest), the
// task cut in its middle (its head and tail kept, a note between saying how
// much) and the state's values each cut shorter, as few bytes as must be, with
// their note (teamValueWithin): the member gets its work, where under older rules
// a task near the ingress's 1 MiB made arguments the delegate tool refused, and
// the team failed on them (member_failed). It follows from folded state only.
func (r *teamRun) handOverArgs(v *view, w *teamWant) string {
	args := handOverJSON(w.member, r.taskText(v, w))
	if r.rules < rulesHandOverWithin || len(args) <= MaxHandOverArguments {
		return args
	}
	members := r.team.cfg.Members
	state := r.state.render(members, r.rules)
	brief := len(handOverJSON(w.member, r.taskTextOf(v, w, "", "")))
	in, st := jsonCost(r.input), jsonCost("\n\n"+state)
	room := MaxHandOverArguments - brief - handOverSlack
	for range 8 { // the costs are upper bounds: the first round fits
		room = max(room, 0)
		inRoom, stRoom := room/2, room-room/2
		switch {
		case in <= room/2:
			inRoom, stRoom = in, room-in
		case st <= room-room/2:
			inRoom, stRoom = room-st, st
		}
		input := cutMiddleWithin(r.input, inRoom, "the team's task")
		args = handOverJSON(w.member, r.taskTextOf(v, w, input, r.stateWithin(members, state, stRoom)))
		if len(args) <= MaxHandOverArguments {
			return args
		}
		room -= len(args) - MaxHandOverArguments + handOverSlack
	}
	return args
}

// stateWithin returns the team's state, rendered whole as state, rendered for a
// hand-over within room bytes of JSON: its values cut as little as lets it fit
// (the longest bound on a value that does), or, when even their notes do not
// fit (a state of very many values), cut in its middle.
func (r *teamRun) stateWithin(members []TeamMember, state string, room int) string {
	if state == "" || jsonCost("\n\n"+state) <= room {
		return state
	}
	fits := func(n int) bool { return jsonCost("\n\n"+r.state.renderWithin(members, r.rules, n)) <= room }
	if !fits(0) {
		return cutMiddleWithin(state, room-2, "the team's state")
	}
	n := sort.Search(TeamHandOverBytes, func(n int) bool { return !fits(n + 1) })
	return r.state.renderWithin(members, r.rules, n)
}

// handOverJSON is the arguments of a delegate call handing member task.
func handOverJSON(member, task string) string {
	args, _ := json.Marshal(DelegateArgs{Agent: member, Task: task}) // strings always encode
	return string(args)
}

// jsonCost is, at the most, how many bytes s takes as a JSON string's content
// as encoding/json writes it: a quote, a backslash and the white space escaped
// take 2, "<", ">" and "&" (escaped for HTML), U+2028, U+2029, another control
// character and a byte that is no UTF-8 take 6.
func jsonCost(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c, size := runeCost(s[i:])
		n += c
		i += size
	}
	return n
}

// runeCost is the JSON cost (jsonCost) of the character s starts with, and its
// length in s.
func runeCost(s string) (cost, size int) {
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && size == 1:
		return 6, 1
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2, 1
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6, size
	}
	return size, size
}

// cutMiddleWithin returns s, or, when its JSON cost (jsonCost) is more than
// room, its head and its tail around a note that says how many bytes of what
// (the team's task, its state) were cut: at most room bytes of JSON, the head
// taking half of what the note leaves, the tail the rest.
func cutMiddleWithin(s string, room int, what string) string {
	if jsonCost(s) <= room {
		return s
	}
	note := func(cut int) string {
		return fmt.Sprintf("\n[… %d bytes of %s cut here: a hand-over carries at most %d bytes]\n", cut, what, MaxHandOverArguments)
	}
	left := max(room-jsonCost(note(len(s))), 0)
	head, used := 0, 0
	for head < len(s) {
		c, size := runeCost(s[head:])
		if used+c > left/2 {
			break
		}
		used += c
		head += size
	}
	tail := len(s)
	for tail > head {
		_, size := utf8.DecodeLastRuneInString(s[head:tail])
		c, _ := runeCost(s[tail-size : tail])
		if used+c > left {
			break
		}
		used += c
		tail -= size
	}
	return s[:head] + note(tail-head) + s[tail:]
}
