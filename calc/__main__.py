"""`python -m calc` runs the gptcalc command line."""

from calc.cli import main

main()
