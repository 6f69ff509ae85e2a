// Command mapctl creates, inspects and exercises sharedmap files.
package main

import "os"

func main() { os.Exit(run(os.Args[1:])) }
