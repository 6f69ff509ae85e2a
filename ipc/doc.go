// Package ipc will hold the value-based cross-process locks (Hapax, Tidex,
// Ticket AWN, cohort, ALock) whose waiting array lives in the map file. It
// is empty until that work lands; see DESIGN.md section 4.
package ipc
