import polars as pl
from parsers.base import ParseResult
NAME="envdump"
SAMPLE_LINES=[]
def parse(lines): return ParseResult()
