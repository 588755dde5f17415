package main

import (
	"fmt"
	"slices"
	"strings"
)

// report is the outcome of a run.
type report struct {
	results []result
	// equivalent and survivors are the mutants judged, with the reason:
	// equivalent ones are left out of the score; known survivors count as
	// survived, with why the suite cannot kill them.
	equivalent, survivors map[string]string
	// counts per target and in all
	byTarget map[string]*tally
	total    tally
	// entries of either list that a run contradicts or that name no
	// mutant, and survivors nobody explained: the lists must not rot.
	stale       []string
	unexplained []result
	errors      []result
}

type tally struct{ killed, timedOut, survived, flaky, equivalent, invalid int }

// score is killed / (killed + survived), timeouts counted as kills, flaky
// ones as survivors, equivalent and invalid ones left out.
func (t tally) score() float64 {
	k := t.killed + t.timedOut
	if d := k + t.survived + t.flaky; d > 0 {
		return 100 * float64(k) / float64(d)
	}
	return 0
}

func (t tally) String() string {
	return fmt.Sprintf("%d mutants: %d killed (%d by a timeout), %d survived, %d flaky, %d equivalent, %d did not build; score %.1f%%",
		t.killed+t.timedOut+t.survived+t.flaky+t.equivalent+t.invalid, t.killed+t.timedOut, t.timedOut, t.survived, t.flaky, t.equivalent, t.invalid, t.score())
}

// summarize counts results; all is every mutant of the targets run (with or
// without -only), to tell an entry of equivalent that names no mutant.
func summarize(results []result, all []mutant, equivalent, survivors map[string]string) *report {
	rep := &report{results: results, equivalent: equivalent, survivors: survivors, byTarget: map[string]*tally{}}
	for i, r := range results {
		t := rep.byTarget[r.t.name]
		if t == nil {
			t = &tally{}
			rep.byTarget[r.t.name] = t
		}
		_, isEquiv := equivalent[r.m.ID]
		_, isKnown := survivors[r.m.ID]
		switch {
		case r.err != nil:
			rep.errors = append(rep.errors, r)
			continue
		case r.verdict == survived && isEquiv:
			results[i].verdict = "equivalent"
			t.equivalent++
		case isEquiv && r.verdict != invalid:
			rep.stale = append(rep.stale, fmt.Sprintf("%s is listed as equivalent but was %s (%s): remove it", r.m.ID, r.verdict, r.spec))
		case (r.verdict == survived || r.verdict == flaky) && !isKnown:
			rep.unexplained = append(rep.unexplained, r)
		case isKnown && r.verdict != survived && r.verdict != flaky:
			rep.stale = append(rep.stale, fmt.Sprintf("%s is listed as a survivor but was %s (%s): remove it from survivors.txt", r.m.ID, r.verdict, r.spec))
		}
		switch results[i].verdict {
		case killed:
			t.killed++
		case timedOut:
			t.timedOut++
		case survived:
			t.survived++
		case flaky:
			t.flaky++
		case invalid:
			t.invalid++
		}
	}
	exists := map[string]bool{}
	files := map[string]bool{}
	for _, m := range all {
		exists[m.ID] = true
		files[m.File] = true
	}
	for list, entries := range map[string]map[string]string{"equivalent.txt": equivalent, "survivors.txt": survivors} {
		for id := range entries {
			if file, _, _ := strings.Cut(id, " "); files[file] && !exists[id] {
				rep.stale = append(rep.stale, fmt.Sprintf("%s, in %s, names no mutant: remove it", id, list))
			}
		}
	}
	slices.Sort(rep.stale)
	for _, t := range rep.byTarget {
		rep.total.killed += t.killed
		rep.total.timedOut += t.timedOut
		rep.total.survived += t.survived
		rep.total.flaky += t.flaky
		rep.total.equivalent += t.equivalent
		rep.total.invalid += t.invalid
	}
	return rep
}

func (rep *report) summaryLine() string {
	var b strings.Builder
	for _, name := range sortedKeys(rep.byTarget) {
		fmt.Fprintf(&b, "mutation %s: %s\n", name, rep.byTarget[name])
	}
	fmt.Fprintf(&b, "mutation total: %s\n", rep.total)
	for _, s := range rep.stale {
		fmt.Fprintf(&b, "STALE %s\n", s)
	}
	for _, r := range rep.unexplained {
		fmt.Fprintf(&b, "UNEXPLAINED survivor %s (%s:%d %s -> %s): add a spec, or its reason to survivors.txt or equivalent.txt\n",
			r.m.ID, r.m.File, r.m.Line, oneLine(r.m.Original), oneLine(r.m.Mutated))
	}
	for _, r := range rep.errors {
		fmt.Fprintf(&b, "ERROR %s: %v\n", r.m.ID, r.err)
	}
	return b.String()
}

// markdown is the full report: the counts, then every survivor, every
// equivalent mutant with its reason, and every kill with the spec that made
// it.
func (rep *report) markdown() string {
	var b strings.Builder
	b.WriteString("# Mutation testing of the conformance suite\n\n")
	b.WriteString("Each mutant is built into its plugin and run through `holdfast-conformance backend` (fail-fast, seed 1, the store restarted by killing the plugin). Score = killed / (killed + survived); equivalent mutants and mutants that do not build are left out.\n\n")
	b.WriteString("| target | killed | by timeout | survived | flaky | equivalent | did not build | score |\n|---|---|---|---|---|---|---|---|\n")
	row := func(name string, t tally) {
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %.1f%% |\n", name, t.killed+t.timedOut, t.timedOut, t.survived, t.flaky, t.equivalent, t.invalid, t.score())
	}
	for _, name := range sortedKeys(rep.byTarget) {
		row(name, *rep.byTarget[name])
	}
	row("all", rep.total)
	section := func(title string, keep func(result) bool, detail func(result) string) {
		var rows []string
		for _, r := range rep.results {
			if keep(r) {
				rows = append(rows, fmt.Sprintf("| `%s` | %s:%d | `%s` | `%s` | %s |", r.m.Operator, r.m.File, r.m.Line,
					mdCode(r.m.Original), mdCode(r.m.Mutated), detail(r)))
			}
		}
		fmt.Fprintf(&b, "\n## %s (%d)\n\n", title, len(rows))
		if len(rows) == 0 {
			return
		}
		b.WriteString("| operator | where | code | mutant | |\n|---|---|---|---|---|\n")
		b.WriteString(strings.Join(rows, "\n") + "\n")
	}
	section("Survived", func(r result) bool { return r.verdict == survived || r.verdict == flaky },
		func(r result) string {
			if reason, ok := rep.survivors[r.m.ID]; ok {
				return reason
			}
			return "UNEXPLAINED (" + string(r.verdict) + "): " + r.m.ID
		})
	section("Equivalent", func(r result) bool { return r.verdict == "equivalent" },
		func(r result) string { return rep.equivalent[r.m.ID] })
	section("Killed", func(r result) bool { return r.verdict == killed || r.verdict == timedOut },
		func(r result) string {
			switch {
			case r.verdict == timedOut:
				return "timeout"
			case r.spec == "":
				return "the plugin did not start"
			}
			return r.spec
		})
	section("Did not build", func(r result) bool { return r.verdict == invalid }, func(r result) string { return "" })
	if len(rep.stale) > 0 {
		b.WriteString("\n## Stale entries of equivalent.txt and survivors.txt\n\n")
		for _, s := range rep.stale {
			fmt.Fprintf(&b, "- %s\n", s)
		}
	}
	return b.String()
}

func mdCode(s string) string {
	s = oneLine(s)
	if len(s) > 90 {
		s = s[:87] + "..."
	}
	return strings.ReplaceAll(s, "|", `\|`)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
