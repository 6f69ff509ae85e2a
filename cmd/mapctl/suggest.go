package main

import (
	"slices"
	"strings"
)

// suggest returns the names close to typed, the closest first: those at
// the least edit distance, if it is at most maxSuggestDistance and less
// than half of typed's length (so that "-k" suggests nothing), and those
// typed is the start of ("rec" for "recover"). At most three, in the order
// of names among equals.
func suggest(typed string, names []string) []string {
	type near struct {
		name string
		dist int
	}
	var found []near
	for _, n := range names {
		d := editDistance(typed, n)
		switch {
		case d <= maxSuggestDistance && 2*d < len(typed):
		case len(typed) >= 2 && strings.HasPrefix(n, typed):
			d = maxSuggestDistance + 1 // after every near miss
		default:
			continue
		}
		found = append(found, near{n, d})
	}
	slices.SortStableFunc(found, func(a, b near) int { return a.dist - b.dist })
	var out []string
	for _, f := range found[:min(len(found), 3)] {
		out = append(out, f.name)
	}
	return out
}

// maxSuggestDistance is the most edits between a misspelt name and one
// suggest offers: two catch a doubled or dropped letter plus a swap
// ("entires", "wacth"), where three would offer "put" for "get".
const maxSuggestDistance = 2

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of adjacent
// bytes that turn one into the other. A swap counts one edit, not two as
// in the Levenshtein distance: "entires" is one from "entries".
func editDistance(a, b string) int {
	// d[i][j] is the distance between a[:i] and b[:j]; three rows kept.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// orList joins names as "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) <= 1 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
