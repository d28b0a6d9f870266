package consolidator_test

import (
	"fmt"
	"time"

	"github.com/troupe-run/troupe/consolidator"
	"github.com/troupe-run/troupe/memory"
)

func ExamplePlan() {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	at := func(age time.Duration) time.Time { return now.Add(-age) }
	mems := []memory.Memory{
		{ID: "m_1", Tier: memory.Episodic, Importance: 0.12, Timestamp: at(45 * 24 * time.Hour)},
		{ID: "m_2", Tier: memory.Working, Importance: 0.5, Hash: "h", Timestamp: at(2 * time.Hour)},
		{ID: "m_3", Tier: memory.Working, Importance: 0.5, Hash: "h", Timestamp: at(time.Hour)},
		{ID: "m_4", Tier: memory.Working, Importance: 0.85, Timestamp: at(time.Hour)},
	}
	for _, d := range consolidator.Plan(now, mems, consolidator.DefaultPolicy()) {
		fmt.Println(d)
	}
	// Output:
	// forget m_1: importance 0.12 < 0.2 and age 45d > 30d
	// merge m_3 into m_2: same content hash as m_2
	// promote m_4 to episodic: importance 0.85 > 0.7
}
