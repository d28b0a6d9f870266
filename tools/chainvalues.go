package tools

import (
	"encoding/json"
	"maps"
	"math/big"
	"slices"
	"text/template"
	"text/template/parse"
)

// The templates of NumbersAsValues (decision rules 11 on) take a number of the
// JSON they read for its value where they test it, and show a JSON null as
// nothing. A json.Number is text to text/template, whose if, with, not, and and
// or take any non-empty text for true: {{if .steps.a.json.n}} held for 0. Such a
// template's parse tree is rewritten (numericTruth) so that what if and with
// test goes through chainTruth, which takes a json.Number for its value, and not
// is chainTruth's negation. A null is a nil jsonNull (nullsShown), an empty
// list: false, ranged over as nothing (range's else), rendered "" and marshalled
// as null, where a nil rendered "<no value>"; eq and ne take it for a nil, equal
// to nil (or another null) only, as under decision rules 10 (chainEq).

// truthFunc is the name of chainTruth in the templates of NumbersAsValues: not an
// identifier a chain's own template can use (it does not parse with chainFuncs).
const truthFunc = "chainTruth"

// chainTruth reports whether v is true as an if of NumbersAsValues takes it: a
// json.Number when its value is not 0, anything else as text/template's if does.
func chainTruth(v any) bool {
	if n, ok := v.(json.Number); ok {
		f, _, err := big.ParseFloat(string(n), 10, 64, big.ToNearestEven)
		return err != nil || f.Sign() != 0 // not a number: non-empty text, true
	}
	truth, _ := template.IsTrue(v)
	return truth
}

// jsonNull is a JSON null as the templates of NumbersAsValues see it, a nil
// jsonNull: false, an empty list to range (which runs its else), rendered ""
// (String), and null through json. A list rather than a pointer, which range
// cannot iterate over.
type jsonNull []any

// String renders a null as nothing.
func (jsonNull) String() string { return "" }

// nullAsNil returns v, or nil when v is a null of NumbersAsValues: what eq, ne
// and the orderings compare, as they compared a null under rules 10.
func nullAsNil(v any) any {
	if _, ok := v.(jsonNull); ok {
		return nil
	}
	return v
}

// nullsShown returns v with each nil inside its maps and slices made a nil
// jsonNull, copying those that hold one. v itself stays nil when it is: a
// step's .json is nil when its result is not JSON.
func nullsShown(v any) any {
	w, _ := nullsIn(v)
	return w
}

// nullsIn returns v as nullsShown makes it, and whether that is a copy.
func nullsIn(v any) (any, bool) {
	switch x := v.(type) {
	case map[string]any:
		var out map[string]any
		for k, e := range x {
			w, changed := nullElem(e)
			if !changed {
				continue
			}
			if out == nil {
				out = maps.Clone(x)
			}
			out[k] = w
		}
		return cmpOr(out, x), out != nil
	case []any:
		var out []any
		for i, e := range x {
			w, changed := nullElem(e)
			if !changed {
				continue
			}
			if out == nil {
				out = slices.Clone(x)
			}
			out[i] = w
		}
		if out != nil {
			return out, true
		}
	}
	return v, false
}

// nullElem returns e, an element of a map or a slice, as nullsShown makes it,
// and whether that differs.
func nullElem(e any) (any, bool) {
	if e == nil {
		return jsonNull(nil), true
	}
	return nullsIn(e)
}

// cmpOr returns a when it is not nil, else b.
func cmpOr(a, b map[string]any) map[string]any {
	if a != nil {
		return a
	}
	return b
}

// numericTruth rewrites the parse trees of t (and the templates it defines) so
// that what their if and with test is taken as chainTruth takes it: {{if P}}
// tests P | chainTruth, the arguments of the and, or and not whose value it tests
// each | chainTruth (truthPipe), and {{with P}}A{{else}}B{{end}} becomes {{if P | chainTruth}}
// {{with P}}A{{end}}{{else}}B{{end}}, which runs A with dot P as before (a number
// not 0 is non-empty text). An if that declares a variable ({{if $x := P}})
// keeps its test, as the variable is P.
func numericTruth(t *template.Template) {
	for _, tt := range t.Templates() {
		if tt.Tree != nil && tt.Tree.Root != nil {
			truthList(tt.Tree.Root)
		}
	}
}

func truthList(l *parse.ListNode) {
	if l == nil {
		return
	}
	for i, n := range l.Nodes {
		switch n := n.(type) {
		case *parse.IfNode:
			truthList(n.List)
			truthList(n.ElseList)
			if len(n.Pipe.Decl) == 0 {
				n.Pipe = truthPipe(n.Pipe)
			}
		case *parse.RangeNode:
			truthList(n.List)
			truthList(n.ElseList)
		case *parse.WithNode:
			truthList(n.List)
			truthList(n.ElseList)
			test := n.Pipe.CopyPipe()
			test.Decl, test.IsAssign = nil, false
			inner := &parse.WithNode{BranchNode: parse.BranchNode{NodeType: parse.NodeWith, Pos: n.Pos, Line: n.Line,
				Pipe: n.Pipe, List: n.List}}
			l.Nodes[i] = &parse.IfNode{BranchNode: parse.BranchNode{NodeType: parse.NodeIf, Pos: n.Pos, Line: n.Line,
				Pipe: truthPipe(test), List: &parse.ListNode{NodeType: parse.NodeList, Pos: n.Pos, Nodes: []parse.Node{inner}},
				ElseList: n.ElseList}}
		}
	}
}

// truthPipe returns p, whose value an if or a with tests, with chainTruth as its
// last command, and each value inside it that is tested too taken as chainTruth
// takes it: the arguments of an and, an or or a not it ends with (written, or
// piped into it: {{if .a | not}} tests .a | chainTruth | not), and the pipeline
// of a parenthesised pipeline it is ({{if (and .a .b)}}), and so on inside
// those. An and or an or elsewhere (eq (or .a "x") "x") keeps its value.
func truthPipe(p *parse.PipeNode) *parse.PipeNode {
	if p == nil || len(p.Cmds) == 0 {
		return p
	}
	n := len(p.Cmds)
	last := p.Cmds[n-1]
	if id, ok := last.Args[0].(*parse.IdentifierNode); ok && (id.Ident == "and" || id.Ident == "or" || id.Ident == "not") {
		for i, a := range last.Args[1:] {
			last.Args[i+1] = truthArg(a)
		}
		if n > 1 { // the value piped into it is its last argument
			prefix := truthPipe(&parse.PipeNode{NodeType: parse.NodePipe, Pos: p.Pos, Cmds: p.Cmds[: n-1 : n-1]})
			p.Cmds = append(prefix.Cmds, last)
		}
	} else if sub, ok := last.Args[0].(*parse.PipeNode); ok && n == 1 && len(last.Args) == 1 && len(sub.Decl) == 0 {
		truthPipe(sub)
	}
	p.Cmds = append(p.Cmds, &parse.CommandNode{NodeType: parse.NodeCommand, Pos: p.Pos,
		Args: []parse.Node{parse.NewIdentifier(truthFunc).SetPos(p.Pos)}})
	return p
}

// truthArg returns a, an argument of an and, an or or a not whose value is
// tested, as (a | chainTruth), made a truthPipe.
func truthArg(a parse.Node) parse.Node {
	if sub, ok := a.(*parse.PipeNode); ok && len(sub.Decl) == 0 {
		return truthPipe(sub)
	}
	return truthPipe(&parse.PipeNode{NodeType: parse.NodePipe, Pos: a.Position(),
		Cmds: []*parse.CommandNode{{NodeType: parse.NodeCommand, Pos: a.Position(), Args: []parse.Node{a}}}})
}
