import sys


def main(argv):
    # TODO: count the words of the file argv[1]
    return 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
