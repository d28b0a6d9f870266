package llm

// The fixed phrases of a team's protocols (package actors, Team): the team writes
// them in its routing prompt and in its members' tasks, a member's answer uses them
// to hand the conversation on, and the offline model recognises them (offlineteam.go).
const (
	// TeamBrief separates a member's task, as the team was given it, from what the
	// team adds to it: the member's role, the team's state, the protocol to follow.
	TeamBrief = "\n\n--- team brief ---\n"
	// TeamRouteAsk ends a team's routing prompt (the model call of purpose "route"):
	// the answer names the member that should do the task.
	TeamRouteAsk = `Answer with one JSON object and nothing else: {"member": "<name>", "reason": "<why>"}`
	// TeamJudgeAsk ends a debate judge's task: the answer accepts a proposal or asks
	// for another round.
	TeamJudgeAsk = `Answer with one JSON object and nothing else: {"verdict": "accept" or "revise", "winner": "<proposer>", "feedback": "<what the proposers should improve>"}`
	// TeamHandoff starts the line of a member's answer that hands the conversation
	// to a peer: "HANDOFF: <member>: <note>".
	TeamHandoff = "HANDOFF:"
	// TeamStateLine starts a line of a member's answer that sets a key of the team's
	// shared state: "STATE: <key> = <value>".
	TeamStateLine = "STATE:"
)
