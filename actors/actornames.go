package actors

import (
	"sync"
	"sync/atomic"
)

// actorNames makes the Actor of the events that answer effects ("model/<name>",
// "tool/<name>") once per model or tool, not once per event. The sessions of a
// host share it.
type actorNames struct {
	models, tools sync.Map // name → prefixed name
	n             atomic.Int32
}

// maxActorNames bounds the names kept; past it, names are made each time.
const maxActorNames = 1024

// model returns "model/"+name.
func (a *actorNames) model(name string) string { return a.of(&a.models, "model/", name) }

// tool returns "tool/"+name.
func (a *actorNames) tool(name string) string { return a.of(&a.tools, "tool/", name) }

func (a *actorNames) of(m *sync.Map, prefix, name string) string {
	if v, ok := m.Load(name); ok {
		return v.(string)
	}
	s := prefix + name
	if a.n.Load() < maxActorNames {
		if _, loaded := m.LoadOrStore(name, s); !loaded {
			a.n.Add(1)
		}
	}
	return s
}
