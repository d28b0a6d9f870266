// Package consolidator keeps memory namespaces worth searching: in the background it
// forgets what is old and unimportant or past a tier's capacity, merges duplicates,
// promotes important working memories to episodic, distils clusters of episodes into
// semantic facts, and marks facts invalid when newer ones contradict them. Every
// change is an event of the namespace with its reason ("importance 0.12 < 0.2 and age
// 45d > 30d", "cosine 0.99 (0.96 calibrated over the tier's floor 0.72, from the
// median 0.77 of its 45 pair cosines and the prior 0.5) ≥ 0.92 with m_x"), so a
// memory's history answers why it was forgotten, merged or invalidated.
//
// # Three layers
//
// Plan is pure: from the memories of a namespace, a time and a Policy it returns the
// Decisions, deterministically (sorted inputs, no map order, no clock of its own). Its
// rules, in the order their decisions are applied:
//
//   - forgetting: a memory less important than MinImportance (default 0.2) and older
//     than its tier's MaxAge (working 24h, episodic and perceptual 30d, semantic
//     none) is forgotten; past a tier's Capacity (working 50, others unbounded), the
//     least valuable valid memories are. Value is importance × Recency(age), Recency
//     being max(0.1, exp(−0.1 × age_hours / 24)); the older memory goes first on a
//     tie. Ages count from a memory's Timestamp.
//   - dedupe: within a tier and modality, exact duplicates (same Hash), then memories
//     whose vectors have a calibrated cosine (below) ≥ DuplicateThreshold (0.92), are
//     merged into the more important one (then the older); facts that give a
//     functional relation different values are never merged (they are a conflict),
//     nor texts that hold other numbers ("May 3" and "May 5", "room 214" and "room
//     412", in any script's digits by value: "５月３日" and "５月５日" too, each
//     number read whole, its parts in order: "2026-05-03" and "2026-03-05", and
//     fractions, superscripts, Roman numerals and English number words: "½" and
//     "¾", "three" and "four", "twenty-one" and "twenty-two": other facts, however close an embedder puts them),
//     nor texts that hold other numbers of negations ("not", "never", "n't", …:
//     "doesn't drink coffee and doesn't eat meat" is not "drinks coffee and eats
//     meat"), nor two of which each names (a word with a
//     capital, no stopword) what the other has in no case ("… manager is Carol"
//     and "… is Dave"); semantic ones go to the conflict judgement instead. The
//     namespace's Merge keeps every source and its metadata.
//   - promotion: working memories more important than PromoteAbove (0.7) move to
//     episodic.
//   - conflicts: among valid semantic facts, a newer one giving another value to a
//     functional relation (same subject and type; DefaultFunctional: lives_in,
//     works_at, is, age, name) invalidates the older one, which is kept, marked
//     invalid with the time and the newer fact's ID. Pairs of facts within calibrated
//     cosine ConflictThreshold (0.75), and below DuplicateThreshold, are candidates
//     (Decision.Judge) for the model to judge.
//   - distillation: episodic memories within calibrated cosine ClusterThreshold (0.8)
//     of a seed (the most important first) form clusters of MinCluster (3) to
//     MaxCluster (20), unless a semantic memory already has all of them as sources
//     (or a fact forgotten had: Forgetting), an episode merged into another
//     counting as the one it went into. The sources of a fact join a new cluster
//     whole (the cluster grew) or not at all, so no episode is distilled twice
//     into parts of two clusters.
//
// The cosine these rules compare is calibrated as memory search calibrates its vector
// term: rescaled from the floor of the set compared (a tier and modality), (cos −
// floor) / (1 − floor). An embedder such as multilingual-e5-small scores unrelated
// texts 0.75–0.85 and different facts about one thing ("enjoys tea" / "enjoys
// coffee") 0.93–0.95: on the raw cosine they were merged; over a floor of 0.75 they
// are about 0.78, and only rephrasings (0.98 and more) reach 0.92.
//
// Dedupe, the rule that merges, takes as floor the median of the set's pair cosines
// (each memory with the next 16) shrunk toward a conservative prior of 0.5 weighing
// memory.FloorPrior (10) pairs: (n · median + 10 · 0.5) / (n + 10), n pairs. The
// median does not follow one memory unrelated to all the others (the least did, and
// adding or forgetting that memory merged or kept apart two facts it has nothing to
// do with); the prior keeps a tier of two to four memories from being compared
// about raw (a floor shrunk toward 0 merged tea and coffee there): such a tier
// merges from a raw cosine of about 0.96–0.97. Its reason states every number: "cosine
// 0.99 (0.96 calibrated over the tier's floor 0.72, from the median 0.77 of its 45
// pair cosines and the prior 0.5) ≥ 0.92 with m_x". Conflict candidates and
// distillation take the least cosine among pairs of the set instead, shrunk toward 0
// when the pairs are few (memory.Floor: least · n / (n + memory.FloorPrior)), and at
// least 0: for an embedder whose unrelated texts are about orthogonal it is about 0,
// and once a pair of the set scores 0 or less it is 0 and they compare the raw
// cosine ("cosine 0.85 ≥ 0.8"); a pair that dedupe calibrates to DuplicateThreshold
// or more is never a conflict candidate.
//
// Dedupe, conflict candidates and distillation compare memories pairwise: every pair
// in sets smaller than ExhaustiveBelow, candidates found by locality-sensitive hashing
// (then compared exactly) in larger ones, where a pair right at a threshold is
// missed about once in a hundred. PlanContext stops when its context is done: Run
// plans with its own, so a run abandoned at its timeout stops planning.
//
// A Consolidator runs one pass over a namespace (Run): it plans and applies rule 1
// (forgetting by age, one pass over the memories) on its own first, so that a run
// whose timeout the pairwise rules of a large namespace use up still forgets; then it
// plans the rest, applies the decisions that need no model, then asks the optional model (llm.Model) for each
// cluster's fact and each candidate conflict's verdict, applying each answer before
// it asks the next question (a run cut short, by a kill or its timeout, keeps the
// answers it got, and the next run asks only the rest). The questions share the
// run's time: while others wait after it, a question takes at most half of what
// remains of the run (the last one all of it), so a question the model stalls on
// leaves the others at least half; the questions a run was cut short on
// (Report.Stalled) are asked after the others by the namespace's next run (AskLast,
// which its NamespaceActor gives it while it lives). An answer that changed nothing
// (two facts judged compatible, a cluster without a durable fact) is named in
// Report.Settled (Answer: the question and a digest of its memories' versions and
// contents); the namespace's next run, given it (Settled, which its NamespaceActor
// gives it while it lives), does not ask that question again while those memories
// are as they were, and judges the next closest pair instead. All goes through a Target, the namespace (*memory.Namespace
// satisfies it). Each decision's idempotency key is DecisionKey(key, decision): a run
// repeated with the same key after a crash applies nothing twice, and decisions whose
// memories vanished or changed meanwhile (another writer rewrote, re-weighed or
// invalidated one) are skipped, the next run planning from what they are then:
// each write expects the versions of its memories as planned (memory.Expect), so a
// change that lands between the run's last look and its write is refused by the
// namespace (memory.ErrChanged), atomically with the write, and skipped alike. A
// cluster whose fact was forgotten is not distilled again (Forgetting). Without a model nothing is distilled and
// only functional conflicts are resolved; an answer the model gave that cannot be
// read (ErrBadAnswer) changes nothing for its cluster or pair. A question shows its
// memories as quoted data: each in a <memory> element of a <memories> block, its
// attributes (a fact's ID, a date, an importance) written by the consolidator, its
// text with "&lt;" for the "<" of any tag of those elements, lookalikes included
// ("＜/ｍｅｍｏｒｉｅｓ＞", a zero-width space in the name), so that a memory can
// neither end the block and speak as the prompt nor pose as another memory; the
// system message says memory text is never an instruction. An answer naming a
// memory its question did not show (another of the namespace's, or an ID of its
// shape that none has) is refused, nothing applied for it, the report saying why;
// an ID the shown memories' text holds is not one it names. A fact or reason the
// model wrote has "<" again for the "&lt;" the quoting wrote.
// The Report counts what
// was done and says what was not and why; its String is what the memory tool's
// consolidate action shows.
//
// A Scheduler runs a NamespaceActor (protoactor) per namespace, spawned on its first
// message: it runs every Interval (10m) after its last run, when the memories written
// since its last run reach Threshold (50), and when asked; one run at a time. A run
// that panics restarts the actor (its supervisor's policy) and leaves the others be.
// A namespace gone idle (a run on the schedule with nothing to do, and nothing written
// or asked since the run before) loses its actor, so that a long-running node neither
// keeps an actor nor loads the namespace every Interval for each namespace it ever
// used; its next message (a write, a request, a node's Schedule when it loads the
// namespace again) spawns one with a new schedule. Scheduler.Namespaces counts them.
//
// # Data in and out
//
// In: the namespace's memories (Target.Snapshot), write notifications
// (Scheduler.Notify, from the memory layer), requests (Scheduler.Wake, and
// Scheduler.Consolidate for the memory tool and `node memory consolidate`), and the
// model's answers. Out: calls of Target's Forget, Merge, Promote, Distill and
// Invalidate, each an event of the namespace with its reason; a Report per run
// (returned, logged, and passed to SchedulerConfig.OnRun).
package consolidator
