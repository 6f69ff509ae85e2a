// Command mapctl creates, fills, dumps, inspects and exercises sharedmap
// files: hash maps in memory-mapped files shared by several processes.
//
// Run "mapctl help" for the list of commands and "mapctl COMMAND --help"
// for one command's arguments, flags and exit status.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) }
