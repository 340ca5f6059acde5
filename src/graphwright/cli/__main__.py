from graphwright.cli import main

main()
