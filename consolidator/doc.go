// Package consolidator will hold the background memory-maintenance actors: forgetting
// by importance, age and capacity; hash and semantic dedupe; working → episodic
// consolidation and episodic → semantic distillation. Each mutation they make is an
// event, so every memory change can be explained. Nothing is implemented yet: it
// arrives with the memory tiers.
package consolidator
